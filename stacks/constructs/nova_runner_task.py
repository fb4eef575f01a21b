"""The Fargate task definition of the Nova Forge runner (``mtrl.backends.nova_runner``), run with the runner role.

The hyperpod adapter starts one task per command (``setup``/``submit``/``status``/``cancel``) with ``RunTask`` on the
reward-worker cluster. The image is built from ``docker/nova-runner/Dockerfile`` by ``cdk deploy``; synth only
stages the context (no Docker).
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from stacks.constructs.encrypted_log_group import EncryptedLogGroup
from stacks.nag import acknowledge

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = "docker/nova-runner/Dockerfile"
# The build context is the repository root, reduced to what the Dockerfile copies.
IMAGE_CONTEXT_EXCLUDES = [
    "*",
    "!pyproject.toml",
    "!README.md",
    "!requirements",
    "!mtrl",
    "!docker/nova-runner",
    "**/__pycache__",
    "**/*.pyc",
]
CONTAINER_NAME = "runner"


class NovaRunnerTask(Construct):
    """Attributes: ``task_definition``, ``container``, ``log_group``, ``family``."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        prefix: str,
        task_role: iam.IRole,
        encryption_key: kms.IKey,
        log_retention_days: int,
    ) -> None:
        super().__init__(scope, id_)
        self.family = f"{prefix}-nova-runner"
        self.log_group = EncryptedLogGroup(
            self,
            "Logs",
            log_group_name=f"/{prefix}/nova-runner",
            encryption_key=encryption_key,
            retention_days=log_retention_days,
        ).log_group
        # The SDK's setup waits for its SAM deploy task and imports heavy packages: 1 vCPU / 4 GiB.
        self.task_definition = ecs.FargateTaskDefinition(
            self,
            "TaskDefinition",
            family=self.family,
            cpu=1024,
            memory_limit_mib=4096,
            task_role=task_role,
            runtime_platform=ecs.RuntimePlatform(
                operating_system_family=ecs.OperatingSystemFamily.LINUX,
                cpu_architecture=ecs.CpuArchitecture.X86_64,
            ),
        )
        image = ecs.ContainerImage.from_asset(
            str(REPO_ROOT),
            file=DOCKERFILE,
            exclude=IMAGE_CONTEXT_EXCLUDES,
            ignore_mode=cdk.IgnoreMode.DOCKER,
            platform=ecr_assets.Platform.LINUX_AMD64,
        )
        self.container = self.task_definition.add_container(
            "Runner",
            container_name=CONTAINER_NAME,
            image=image,
            logging=ecs.LogDrivers.aws_logs(stream_prefix="runner", log_group=self.log_group),
            # The command (`setup --spec s3://…`) comes as a container override per run; nothing secret here.
            environment={"MTRL_COMPONENT": "nova-runner"},
        )
        acknowledge(
            self.task_definition,
            "AwsSolutions-ECS2",
            "The only environment variable is a non-secret component name; per-run values are container overrides.",
        )
        execution_role = self.task_definition.execution_role
        assert execution_role is not None
        default_policy = execution_role.node.try_find_child("DefaultPolicy")
        assert default_policy is not None
        acknowledge(
            default_policy,
            "AwsSolutions-IAM5[Resource::*]",
            "ecr:GetAuthorizationToken (image pull login, added by CDK) has no resource-level permissions.",
        )
