"""What the backends' stack sides share for the pipeline's backend function: one inline policy per backend on its
role, each wildcard resource acknowledged with the reason it cannot be narrower.

Every statement of a backend is derived from an AWS call of its adapter (named in the statement's ``sid`` or its
comment). Wildcards appear only for per-run names or for actions without resource-level permissions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct

from stacks.nag import acknowledge, nag_resource

if TYPE_CHECKING:
    from stacks.backends.contract import StackInputs

ECS_TASKS = "ecs-tasks.amazonaws.com"
SAGEMAKER = "sagemaker.amazonaws.com"
JOB_SAGEMAKER = "job.sagemaker.amazonaws.com"

# A backend's statements, and why each of their wildcard resources cannot be narrower (keyed by the resource).
PolicyParts = tuple[list[iam.PolicyStatement], dict[str, str]]


def arn_and_where(stack: cdk.Stack) -> tuple[str, str]:
    """(``arn:<partition>``, ``<region>:<account>``) of the stack: the start of every ARN the statements name."""
    return f"arn:{stack.partition}", f"{stack.region}:{stack.account}"


def imported_bucket_arn(inputs: StackInputs) -> str:
    """The data bucket's ARN through the pipeline's explicitly named export: the wildcard grants on its prefixes then
    render to a stable id the acknowledgments can name at construction time (an automatic export ends in a hash)."""
    export_name = f"{inputs.settings.prefix}-data-bucket-arn"
    producer = cdk.Stack.of(inputs.data_bucket)
    if producer.node.try_find_child(f"Export{export_name}") is None:  # the pipeline stack exports it first
        producer.export_value(inputs.data_bucket.bucket_arn, name=export_name)
    return cdk.Fn.import_value(export_name)


def cluster_group_statements(stack: cdk.Stack, cluster_arn: str | None, node_role_arn: str | None) -> PolicyParts:
    """What scaling a group of the deployment's HyperPod cluster takes (``mtrl.backends.hyperpod.capacity``
    ``GpuCapacity``: DescribeCluster, UpdateCluster, ListClusterNodes, ListClusterEvents; UpdateCluster re-states the
    group's execution role, a PassRole to SageMaker). Every backend that scales a group states them in its own policy
    (hyperpod: the restricted group, verl: the training group), so each keeps them where the other is not deployed.

    ``cluster_arn`` None: an existing cluster, whose ARN ends in an id the configuration does not know."""
    arn, where = arn_and_where(stack)
    cluster = cluster_arn or f"{arn}:sagemaker:{where}:cluster/*"
    statements = [
        iam.PolicyStatement(
            sid="HyperPodScaleTrainingGroup",  # DescribeCluster/UpdateCluster/ListClusterNodes/ListClusterEvents
            actions=[
                "sagemaker:DescribeCluster",
                "sagemaker:UpdateCluster",
                "sagemaker:ListClusterNodes",
                "sagemaker:ListClusterEvents",
            ],
            resources=[cluster],
        )
    ]
    if node_role_arn is not None:
        statements.append(
            iam.PolicyStatement(
                sid="PassNodeRoleOnUpdateCluster",  # UpdateCluster re-states the group's ExecutionRole
                actions=["iam:PassRole"],
                resources=[node_role_arn],
                conditions={"StringEquals": {"iam:PassedToService": SAGEMAKER}},
            )
        )
    reasons = {
        cluster: "An existing HyperPod cluster's ARN ends in a service-generated id the configuration does not know; "
        "the actions only describe and scale clusters."
    }
    return statements, reasons


class BackendFunctionPolicy(Construct):
    """An inline policy with ``statements`` on ``role`` (the backend function's). Attribute: ``policy``.

    ``wildcard_reasons``: why each wildcard resource cannot be narrower, keyed by the resource as the statements name
    it; a wildcard without one is a synth error.
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        role: iam.IRole,
        statements: Sequence[iam.PolicyStatement],
        wildcard_reasons: Mapping[str, str],
    ) -> None:
        super().__init__(scope, id_)
        self.policy = iam.Policy(self, "Policy", statements=list(statements))
        role.attach_inline_policy(self.policy)
        self._acknowledge_wildcards(statements, wildcard_reasons)

    def _acknowledge_wildcards(self, statements: Sequence[iam.PolicyStatement], reasons: Mapping[str, str]) -> None:
        """One IAM5 acknowledgment per wildcard resource, with its documented reason."""
        stack = cdk.Stack.of(self)
        acknowledged: set[str] = set()
        for statement in statements:
            for resource in statement.resources:
                rendered = str(stack.resolve(resource))
                if "*" not in rendered:
                    continue
                finding = f"AwsSolutions-IAM5[Resource::{nag_resource(self, resource)}]"
                if finding in acknowledged:
                    continue
                acknowledged.add(finding)
                reason = reasons.get(resource)
                if reason is None:
                    raise ValueError(f"wildcard resource without a documented reason: {rendered}")
                acknowledge(self.policy, finding, reason)
