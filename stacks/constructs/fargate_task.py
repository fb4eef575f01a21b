"""What the Fargate tasks built from this repository share (reward workers, Nova Forge runner, the sessions loop): a
role only this account's ECS tasks may assume, a Linux task definition, an image built from the repository root and
the one acknowledgment its image pull needs, and the hardened container of a task that runs environments' episodes."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from constructs import Construct

from stacks.nag import acknowledge

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRATCH_VOLUME = "scratch"
# Docker's default capabilities minus what the sandbox (mtrl/sandbox, fargate tier) does not use as root.
# Kept: SETUID/SETGID (switch to a throwaway uid), KILL (kill that uid's leftovers), CHOWN/FOWNER/DAC_OVERRIDE
# (remove its work directory whatever it did to it), SETPCAP (empty the capability bounding set of every process
# it starts). Generated code itself never holds any capability, in any set.
DROPPED_CAPABILITIES = (
    ecs.Capability.AUDIT_WRITE,
    ecs.Capability.FSETID,
    ecs.Capability.MKNOD,
    ecs.Capability.NET_BIND_SERVICE,
    ecs.Capability.NET_RAW,
    ecs.Capability.SETFCAP,
    ecs.Capability.SYS_CHROOT,
)


def ecs_tasks_principal(scope: Construct) -> iam.ServicePrincipal:
    """ECS tasks, of this account only (the confused-deputy guard of a task role's trust policy)."""
    stack = cdk.Stack.of(scope)
    return iam.ServicePrincipal(
        "ecs-tasks.amazonaws.com",
        conditions={
            "StringEquals": {"aws:SourceAccount": stack.account},
            "ArnLike": {"aws:SourceArn": f"arn:{stack.partition}:ecs:{stack.region}:{stack.account}:*"},
        },
    )


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


def image_context_excludes(docker_folder: str, *sources: str) -> list[str]:
    """The build context of an image built from the repository root (.dockerignore syntax): nothing but the package's
    files and ``mtrl``, the other ``sources`` its Dockerfile copies, and its own ``docker_folder``."""
    kept = ["pyproject.toml", "README.md", "requirements", "mtrl", *sources, docker_folder]
    return ["*", *(f"!{path}" for path in kept), "**/__pycache__", "**/*.pyc"]


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


def sandbox_linux_parameters(scope: Construct) -> ecs.LinuxParameters:
    parameters = ecs.LinuxParameters(scope, "WorkerLinuxParameters", init_process_enabled=True)
    parameters.drop_capabilities(*DROPPED_CAPABILITIES)
    return parameters


def add_sandboxed_container(
    scope: Construct,
    task_definition: ecs.TaskDefinition,
    construct_id: str,
    *,
    container_name: str,
    image: ecs.ContainerImage,
    logging: ecs.LogDriver,
    environment: Mapping[str, str],
    stop_timeout: cdk.Duration | None = None,
) -> ecs.ContainerDefinition:
    """The container of a task that runs environments' episodes, generated code included (docs/sandbox.md): a
    read-only root file system whose one writable path is a private ``/tmp`` (the task's own storage, no host path),
    never privileged, and only the capabilities the sandbox's fargate tier needs as root (switch to and signal
    throwaway uids, hand them their work directory)."""
    container = task_definition.add_container(
        construct_id,
        container_name=container_name,
        image=image,
        logging=logging,
        stop_timeout=stop_timeout,
        readonly_root_filesystem=True,
        privileged=False,
        linux_parameters=sandbox_linux_parameters(scope),
        environment=dict(environment),
    )
    task_definition.add_volume(name=SCRATCH_VOLUME)
    container.add_mount_points(
        ecs.MountPoint(container_path="/tmp", source_volume=SCRATCH_VOLUME, read_only=False)  # noqa: S108
    )
    return container
