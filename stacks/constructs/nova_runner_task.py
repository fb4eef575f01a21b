"""The Fargate task definition of the Nova Forge runner (``mtrl.backends.hyperpod.nova_runner``), with the runner role.

The hyperpod adapter starts one task per command (``setup``/``submit``/``status``/``cancel``) with ``RunTask`` on the
reward-worker cluster. The image is built from ``docker/nova-runner/Dockerfile`` by ``cdk deploy``; synth only
stages the context (no Docker). Only a deployment that configures Nova Forge (``hyperpod_restricted_instance_group``)
has it: the image needs the subscriber-only HyperPod CLI (``hyperpod_cli_problem``).
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from stacks.constructs.encrypted_log_group import EncryptedLogGroup
from stacks.constructs.fargate_task import REPO_ROOT, acknowledge_image_pull_login, linux_task_definition, repo_image
from stacks.nag import acknowledge

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
# Where the operator copies the subscriber-only Forge HyperPod CLI (its README); the image build refuses a copy without
# either file (the Dockerfile's `RUN test -f …`).
HYPERPOD_CLI_DIR = REPO_ROOT / "docker" / "nova-runner" / "hyperpod-cli"
HYPERPOD_CLI_MARKERS = ("pyproject.toml", "setup.py")


def hyperpod_cli_problem(cli_dir: Path = HYPERPOD_CLI_DIR) -> str | None:
    """Why ``cdk deploy`` cannot build the runner image from this checkout (no HyperPod CLI copied in), else None."""
    if any((cli_dir / marker).is_file() for marker in HYPERPOD_CLI_MARKERS):
        return None
    return (
        "docker/nova-runner/hyperpod-cli/ holds no Forge HyperPod CLI (no pyproject.toml or setup.py), so "
        "`cdk deploy` cannot build the Nova Forge runner image: copy your Nova Forge subscription's CLI there "
        "(its README.md), or unset hyperpod_restricted_instance_group if this deployment does not use Nova Forge"
    )


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
        self.task_definition = linux_task_definition(
            self, family=self.family, cpu=1024, memory_limit_mib=4096, task_role=task_role, arm=False
        )
        self.container = self.task_definition.add_container(
            "Runner",
            container_name=CONTAINER_NAME,
            image=repo_image(DOCKERFILE, exclude=IMAGE_CONTEXT_EXCLUDES, arm=False),
            logging=ecs.LogDrivers.aws_logs(stream_prefix="runner", log_group=self.log_group),
            # The command (`setup --spec s3://…`) comes as a container override per run; nothing secret here.
            environment={"MTRL_COMPONENT": "nova-runner"},
        )
        acknowledge(
            self.task_definition,
            "AwsSolutions-ECS2",
            "The only environment variable is a non-secret component name; per-run values are container overrides.",
        )
        acknowledge_image_pull_login(self.task_definition)
