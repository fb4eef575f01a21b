"""IAM for the training backends, composed from each backend's own roles: the serverless job and agent roles
(``stacks.backends.serverless``), the Nova Forge runner role and the RFT role (``stacks.backends.hyperpod.roles``).
Shared here: every policy's wildcard findings acknowledged with its reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.backends.hyperpod.roles import nova_forge_roles
from stacks.backends.serverless import agent_role, serverless_job_role
from stacks.nag import acknowledge, nag_resource


class BackendRoles(Construct):
    """Attributes: ``serverless_job_role``, ``agent_role``, ``runner_role``, ``rft_role``, ``rft_policy`` (the last
    three None without ``nova_forge``).

    Props:
    - ``prefix``: the deployment prefix; per-run stacks, queues, functions and tables are ``<stem>-nf*``.
    - ``data_bucket`` / ``data_key``: where runs read and write (``runs/<run-id>/…``) and the key that encrypts it.
    - ``reward_cluster_arn``: the ECS cluster the runner starts tasks on.
    - ``hyperpod_cluster_arn`` / ``eks_cluster_arn``: what ``hyperpod connect-cluster`` reads.
    - ``mlflow_arn``: the MLflow app (serverless jobs) or tracking server (Nova Forge).
    - ``agent_runtime_arns``: the AgentCore runtimes serverless jobs may call (none: no AgentCore statement).
    - ``rft_role_name``: defaults to ``<prefix>-rft``; the policy is ``<rft_role_name>Policy`` exactly.
    - ``allow_sam_role_creation``: the SDK deploys its SAM template with ``CAPABILITY_IAM``, so whoever runs
      ``sam deploy`` (the RFT role, in the SDK's ECS task) must create the template's Lambda roles. Off by default:
      turning it on grants role creation limited to ``role/<stem>-nf*``.
    - ``nova_forge``: build the hyperpod backend's runner and RFT roles; False where the deployment does not deploy
      that backend (``DeploySettings.backend_problem``): roles nothing could use.
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        prefix: str,
        data_bucket: s3.IBucket,
        data_key: kms.IKey,
        reward_cluster_arn: str,
        hyperpod_cluster_arn: str,
        eks_cluster_arn: str,
        mlflow_arn: str,
        agent_runtime_arns: Sequence[str] = (),
        rft_role_name: str | None = None,
        allow_sam_role_creation: bool = False,
        nova_forge: bool = True,
    ) -> None:
        super().__init__(scope, id_)
        self.prefix = prefix
        # Why each policy's wildcards cannot be narrower; acknowledged finding by finding at the end.
        self._wildcard_reasons: dict[str, str] = {}
        self.rft_role_name = rft_role_name or f"{prefix}-rft"
        self.agent_runtime_arns = list(agent_runtime_arns)
        self.serverless_job_role = serverless_job_role(
            self,
            prefix=prefix,
            data_bucket=data_bucket,
            data_key=data_key,
            mlflow_arn=mlflow_arn,
            agent_runtime_arns=self.agent_runtime_arns,
            wildcard_reasons=self._wildcard_reasons,
        )
        self.agent_role = agent_role(self, prefix=prefix)
        # The hyperpod backend's roles only where the deployment deploys that backend.
        nova = (
            nova_forge_roles(
                self,
                prefix=prefix,
                rft_role_name=self.rft_role_name,
                data_bucket=data_bucket,
                data_key=data_key,
                reward_cluster_arn=reward_cluster_arn,
                hyperpod_cluster_arn=hyperpod_cluster_arn,
                eks_cluster_arn=eks_cluster_arn,
                allow_sam_role_creation=allow_sam_role_creation,
                wildcard_reasons=self._wildcard_reasons,
            )
            if nova_forge
            else None
        )
        self.rft_role: iam.Role | None = nova.rft_role if nova else None
        self.runner_role: iam.Role | None = nova.runner_role if nova else None
        self.rft_policy: iam.ManagedPolicy | None = nova.rft_policy if nova else None
        self._acknowledge_wildcards()

    def _acknowledge_wildcards(self) -> None:
        """Acknowledge each IAM5 finding (one per wildcard action/resource) with its policy's reason."""
        for owner_id, reason in self._wildcard_reasons.items():
            owner = self.node.find_child(owner_id)
            policy = owner if isinstance(owner, iam.ManagedPolicy) else owner.node.try_find_child("DefaultPolicy")
            if not isinstance(policy, iam.Policy | iam.ManagedPolicy):
                continue
            for statement in policy.document.to_json().get("Statement", []):
                for action in _as_list(statement.get("Action")):
                    if "*" in action:
                        acknowledge(policy, f"AwsSolutions-IAM5[Action::{action}]", reason)
                for resource in _as_list(statement.get("Resource")):
                    if "*" in str(cdk.Stack.of(self).resolve(resource)):
                        acknowledge(policy, f"AwsSolutions-IAM5[Resource::{nag_resource(self, resource)}]", reason)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]
