"""The serverless MTRL agent Lambda (``lambda/serverless_agent``) for one environment: ``<prefix>-agent-<env_id>``.

The serverless job role may invoke exactly ``function:<prefix>-agent-*`` (``backend_roles.py``), so the name is fixed
here. The function runs with the agent role (job-runtime access: Sample, CompleteRollout, UpdateReward) and with the
project's dependency layer, which carries the pinned boto3/botocore (requirements/runtime.txt): the runtime's own
boto3 may predate the ``sagemakerjobruntime`` service model, and every rollout would then fail with
UnknownServiceError.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from stacks.constructs.python_function import PythonFunction
from stacks.nag import acknowledge


def agent_function_name(prefix: str, env_id: str) -> str:
    # Lambda names allow [A-Za-z0-9-_]; env ids are [a-z0-9_].
    return f"{prefix}-agent-{env_id}"[:64]


class AgentFunction(Construct):
    """Attributes: ``function``, ``function_name``, ``log_group``."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        prefix: str,
        env_id: str,
        role: iam.IRole,
        encryption_key: kms.IKey,
        log_retention_days: int,
    ) -> None:
        super().__init__(scope, id_)
        self.function_name = agent_function_name(prefix, env_id)
        wrapped = PythonFunction(
            self,
            "Agent",
            handler_dir="serverless_agent",
            description=f"Serverless MTRL agent: plays {env_id} episodes for SageMaker AgentRFT jobs",
            encryption_key=encryption_key,
            log_retention_days=log_retention_days,
            log_group_name=f"/aws/lambda/{self.function_name}",
            environment={"MTRL_ENV_ID": env_id},
            # One rollout is a whole multi-turn episode with model calls in between.
            timeout=cdk.Duration.minutes(15),
            memory_size=1024,
            function_name=self.function_name,
            role=role,
            # The layer's boto3/botocore (pinned) shadow the runtime's, which may not know sagemakerjobruntime.
            with_dependency_layer=True,
        )
        self.function = wrapped.function
        self.log_group = wrapped.log_group
        policy = role.node.try_find_child("DefaultPolicy")
        if policy is not None:
            # CDK adds X-Ray trace upload (active tracing) and the env-var key grant to the agent role.
            acknowledge(
                policy, "AwsSolutions-IAM5[Resource::*]", "X-Ray trace upload supports no resource-level permissions."
            )
