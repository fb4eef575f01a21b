"""Names of a hyperpod run's Nova Forge resources, and the IAM pattern that covers them (imported by the stacks).

The Nova Forge SDK validates the stack name it is given and ``<name>-NovaForgeSDK`` against CloudFormation's
and Lambda's limits: at most 32 characters each (``validate_stack_name`` in
``amzn_nova_forge.validation.rft_multiturn_validator``, called by ``BaseRFTInfrastructure.__init__`` for the base
and by ``CommonInfraCommands._build_sam_deploy_commands`` for the suffixed name), so the base is at most 19.
The SDK then names everything after the suffixed name: the stack ``<base>-NovaForgeSDK``, the proxy function
``<base>-NovaForgeSDK-SageMaker-proxy``, the log group ``/ecs/<base>-NovaForgeSDK``, the task family
``<base>-NovaForgeSDK-task``.

The base is ``<stem>-nf<hash of the run id>``: ``stem`` is the deployment prefix when it is at most 7 characters,
otherwise 2 of its characters and 5 of its hash, so the IAM pattern ``<stem>-nf*`` is fixed per deployment. The
``-nf`` marker keeps the pattern off the deployment's own ``<prefix>-rft``, ``<prefix>-reward-workers``… names.
This module imports nothing heavy: ``stacks/`` use it to scope the grants.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

SDK_STACK_SUFFIX = "NovaForgeSDK"  # appended by the SDK to the stack name it is given
SDK_NAME_LIMIT = 32  # validate_stack_name's limit, applied to the base and to <base>-NovaForgeSDK
BASE_NAME_LIMIT = SDK_NAME_LIMIT - len(SDK_STACK_SUFFIX) - 1  # 19
STEM_LIMIT = 7
RUN_MARKER = "-nf"


class HasPrefix(Protocol):
    @property
    def prefix(self) -> str: ...


def _hash(value: str, length: int) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:length]


def run_stack_stem(prefix: str) -> str:
    """The deployment's part of every run's base name (≤ 7 characters, starts with the prefix's first letter)."""
    if len(prefix) <= STEM_LIMIT:
        return prefix
    return f"{prefix[:2]}{_hash(prefix, STEM_LIMIT - 2)}"


def run_stack_base(prefix: str, run_id: str) -> str:
    """The stack name given to the SDK for one run: ≤ 19 characters, stable per run, distinct between runs."""
    stem = run_stack_stem(prefix)
    return f"{stem}{RUN_MARKER}{_hash(run_id, BASE_NAME_LIMIT - len(stem) - len(RUN_MARKER))}"


def run_name_pattern(prefix: str) -> str:
    """IAM resource-name pattern matching every per-run name of this deployment (``<stem>-nf*``)."""
    return f"{run_stack_stem(prefix)}{RUN_MARKER}*"


def sdk_stack_name(settings: HasPrefix, run_id: str) -> str:
    """``run_stack_base`` for a run's hyperpod settings."""
    return run_stack_base(settings.prefix, run_id)


def cloudformation_stack_name(settings: HasPrefix, run_id: str) -> str:
    """The stack the SDK deploys for the run: ``<base>-NovaForgeSDK``."""
    return f"{sdk_stack_name(settings, run_id)}-{SDK_STACK_SUFFIX}"


def sdk_log_group_name(stack_name: str) -> str:
    """The log group the SDK's setup() creates for its starter-kit ECS task: ``/ecs/<base>-NovaForgeSDK``."""
    return f"/ecs/{stack_name}"


WORKER_ROLE_SUFFIX = "-worker"
# What a reward worker does on its run's queues (the deploy-time boundary and each run's own policy grant these).
WORKER_QUEUE_ACTIONS = (
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:SendMessage",
    "sqs:GetQueueAttributes",
    "sqs:GetQueueUrl",
)


def worker_role_name(prefix: str, run_id: str) -> str:
    """The run's own reward-worker task role: ``<base>-worker`` (≤ 26 characters)."""
    return f"{run_stack_base(prefix, run_id)}{WORKER_ROLE_SUFFIX}"


def worker_role_pattern(prefix: str) -> str:
    """IAM role-name pattern of every run's worker role of this deployment (``<stem>-nf*-worker``)."""
    return f"{run_name_pattern(prefix)}{WORKER_ROLE_SUFFIX}"
