"""What the Fargate tasks built from this repository share (reward workers, Nova Forge runner): a Linux task
definition, an image built from the repository root, and the one acknowledgment its image pull needs."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from constructs import Construct

from stacks.nag import acknowledge

REPO_ROOT = Path(__file__).resolve().parents[2]


def linux_task_definition(
    scope: Construct, *, family: str, cpu: int, memory_limit_mib: int, task_role: iam.IRole, arm: bool
) -> ecs.FargateTaskDefinition:
    return ecs.FargateTaskDefinition(
        scope,
        "TaskDefinition",
        family=family,
        cpu=cpu,
        memory_limit_mib=memory_limit_mib,
        task_role=task_role,
        runtime_platform=ecs.RuntimePlatform(
            operating_system_family=ecs.OperatingSystemFamily.LINUX,
            cpu_architecture=ecs.CpuArchitecture.ARM64 if arm else ecs.CpuArchitecture.X86_64,
        ),
    )


def repo_image(dockerfile: str, *, exclude: list[str], arm: bool) -> ecs.ContainerImage:
    """Built by `cdk deploy` (Docker needed then); synth only stages the context, the repository root reduced
    to what the Dockerfile copies (``exclude``, in .dockerignore syntax)."""
    return ecs.ContainerImage.from_asset(
        str(REPO_ROOT),
        file=dockerfile,
        exclude=exclude,
        ignore_mode=cdk.IgnoreMode.DOCKER,
        platform=ecr_assets.Platform.LINUX_ARM64 if arm else ecr_assets.Platform.LINUX_AMD64,
    )


def acknowledge_image_pull_login(task_definition: ecs.TaskDefinition) -> None:
    """Call after adding the container: its image pull creates the execution role's default policy."""
    execution_role = task_definition.execution_role
    assert execution_role is not None
    default_policy = execution_role.node.try_find_child("DefaultPolicy")
    assert default_policy is not None
    acknowledge(
        default_policy,
        "AwsSolutions-IAM5[Resource::*]",
        "ecr:GetAuthorizationToken (image pull login, added by CDK) has no resource-level permissions.",
    )
