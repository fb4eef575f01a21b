"""Template helpers and least-privilege checks shared by the cluster and reward-worker tests (DESIGN §6)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

from cfnlint.api import ManualArgs
from cfnlint.config import ConfigMixIn
from cfnlint.decode.decode import decode_str
from cfnlint.rules import Match
from cfnlint.runner import Runner

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


# cfn-lint's configuration for every synthesized template here. W3005 (redundant DependsOn) is emitted by CDK itself
# for every Lambda/role pair.
CFN_LINT_CONFIG = ManualArgs(regions=["us-east-1"], ignore_checks=["W3005"])


@cache
def _cfn_lint_runner() -> Runner:
    # What cfnlint.api.lint builds on every call (about a second of loading its rules): one per process, as
    # cfn-lint's own CLI lints all the templates it is given with one runner.
    return Runner(ConfigMixIn(**CFN_LINT_CONFIG))


@cache
def _cfn_lint_text(text: str) -> tuple[Match, ...]:
    # cfnlint.api.lint(text, config=CFN_LINT_CONFIG), with the runner shared.
    template, errors = decode_str(text)
    if errors:
        return tuple(errors)
    if template is None:
        return ()
    return tuple(_cfn_lint_runner().validate_template(template))


def cfn_lint(template: Mapping[str, Any] | str) -> list[Match]:
    """cfn-lint's findings for a template (a dict, or a template file's text), with CFN_LINT_CONFIG.

    A template is linted once per process: the same default-app template is checked by test_compliance (every
    stack) and again by its stack's own tests (cluster, pipeline, reward workers)."""
    parsed = json.loads(template) if isinstance(template, str) else template
    return list(_cfn_lint_text(json.dumps(parsed)))


def shipped_backend_values(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The backend function's ``MTRL_BACKEND_SETTINGS`` (backend → its values), each CDK token as ``"<token>"``.

    The JSON is rendered as a ``Fn::Join`` whose parts are text and references; every reference sits inside a JSON
    string, so putting a placeholder in its place keeps the document parseable."""
    (variables,) = [
        resource["Properties"]["Environment"]["Variables"]
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::Lambda::Function"
        and "MTRL_BACKEND_SETTINGS" in resource["Properties"].get("Environment", {}).get("Variables", {})
    ]
    rendered = variables["MTRL_BACKEND_SETTINGS"]
    if isinstance(rendered, dict):
        separator, parts = rendered["Fn::Join"]
        rendered = separator.join(part if isinstance(part, str) else "<token>" for part in parts)
    return dict(json.loads(rendered))
