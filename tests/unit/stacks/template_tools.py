"""Template helpers and least-privilege checks shared by the cluster and reward-worker tests (DESIGN §6)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# Actions with no resource-level permissions: the only ones allowed on Resource "*".
NO_RESOURCE_LEVEL_ACTIONS = frozenset(
    {
        "ec2:DescribeInstances",
        "ec2:DescribeInstanceTypes",
        "ec2:DescribeNetworkInterfaces",
        "ec2:DescribeSubnets",
        "ec2:DescribeSecurityGroups",
        "ec2:DescribeVpcs",
        "ec2:DescribeTags",
        "ec2:DescribeDhcpOptions",
        "ecr:GetAuthorizationToken",
        "cloudwatch:PutMetricData",
    }
)


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def policy_statements(template: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(logical id, statement) for every identity-based policy statement in a template."""
    for logical_id, resource in template["Resources"].items():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::IAM::Policy":
            for statement in props["PolicyDocument"]["Statement"]:
                yield logical_id, statement
        elif resource["Type"] == "AWS::IAM::Role":
            for policy in props.get("Policies", []):
                for statement in policy["PolicyDocument"]["Statement"]:
                    yield logical_id, statement


def least_privilege_violations(template: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    for logical_id, statement in policy_statements(template):
        actions = as_list(statement.get("Action", []))
        resources = as_list(statement.get("Resource", []))
        if any(action == "*" or action.endswith(":*") for action in actions):
            problems.append(f"{logical_id}: wildcard action {actions}")
        if "*" in resources:
            broad = sorted(set(actions) - NO_RESOURCE_LEVEL_ACTIONS)
            if broad:
                problems.append(f"{logical_id}: Resource '*' for actions with resource-level support {broad}")
        if "iam:PassRole" in actions:
            passed = statement.get("Condition", {}).get("StringEquals", {}).get("iam:PassedToService")
            if not passed:
                problems.append(f"{logical_id}: iam:PassRole without iam:PassedToService")
        for prefix in ("iam:", "cloudformation:", "sts:AssumeRole"):
            if any(action.startswith(prefix) and action != "iam:PassRole" for action in actions):
                problems.append(f"{logical_id}: runtime role may use {prefix} actions {actions}")
    return problems


def only(template: dict[str, Any], resource_type: str) -> tuple[str, dict[str, Any]]:
    """The single resource of a type, as (logical id, resource)."""
    found = [(k, v) for k, v in template["Resources"].items() if v["Type"] == resource_type]
    assert len(found) == 1, f"expected one {resource_type}, found {len(found)}"
    return found[0]


def of_type(template: dict[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == resource_type}
