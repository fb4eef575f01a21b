"""What the hyperpod adapter (``mtrl.backends.hyperpod``) may do from the pipeline's backend function.

Wildcards appear only for per-run names (``<stem>-nf*``, see ``mtrl.backends.hyperpod.naming``; task ids) or for
actions without resource-level permissions; each is acknowledged with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam

from mtrl.backends.hyperpod.naming import run_name_pattern, worker_role_pattern
from stacks.backends.contract import StackInputs
from stacks.backends.permissions import ECS_TASKS, PolicyParts, arn_and_where, cluster_group_statements


@dataclass(frozen=True)
class HyperPodTargets:
    """What a hyperpod run touches. ``hyperpod_cluster_arn`` None = an existing cluster (ARN id unknown)."""

    hyperpod_cluster_arn: str | None
    node_role_arn: str | None
    reward_cluster_name: str
    task_families: list[str]
    task_role_arns: list[str]  # task and execution roles of the reward-worker and runner task definitions
    worker_run_boundary_arn: str  # permissions boundary every run's worker role is created under
    worker_base_policy_arn: str  # the one managed policy a run's worker role may have attached

    @classmethod
    def of(cls, inputs: StackInputs) -> HyperPodTargets:
        workers = inputs.reward_workers
        runner = inputs.backends.runner
        definitions = [workers.task_definition, *([runner.task_definition] if runner is not None else [])]
        task_roles = [workers.task_role.role_arn, *([runner.task_definition.task_role.role_arn] if runner else [])]
        task_roles += [definition.execution_role.role_arn for definition in definitions if definition.execution_role]
        return cls(
            hyperpod_cluster_arn=inputs.cluster.hyperpod_cluster_arn,
            node_role_arn=inputs.cluster.node_role_arn,
            # The literal name RewardWorkers gives its cluster: a cross-stack token would not render in the
            # acknowledgment ids of the task-scoped statements.
            reward_cluster_name=f"{inputs.settings.prefix}-reward-workers",
            task_families=[definition.family for definition in definitions],
            task_role_arns=task_roles,
            worker_run_boundary_arn=workers.run_boundary.managed_policy_arn,
            worker_base_policy_arn=workers.base_policy.managed_policy_arn,
        )


@dataclass(frozen=True)
class _Names:
    """The ARNs and name patterns the statements share, for one stack and deployment prefix."""

    arn: str  # arn:<partition>
    where: str  # <region>:<account>
    run_scoped: str  # every per-run Nova Forge name: <stem>-nf<hash>…
    reward_cluster_arn: str
    run_tasks: str
    worker_roles: str

    @classmethod
    def of(cls, stack: cdk.Stack, prefix: str, hyperpod: HyperPodTargets) -> _Names:
        arn, where = arn_and_where(stack)
        return cls(
            arn=arn,
            where=where,
            run_scoped=run_name_pattern(prefix),
            reward_cluster_arn=f"{arn}:ecs:{where}:cluster/{hyperpod.reward_cluster_name}",
            run_tasks=f"{arn}:ecs:{where}:task/{hyperpod.reward_cluster_name}/*",
            worker_roles=f"{arn}:iam::{stack.account}:role/{worker_role_pattern(prefix)}",
        )

    @property
    def on_reward_cluster(self) -> dict[str, Any]:
        return {"ArnEquals": {"ecs:cluster": self.reward_cluster_arn}}


def _wildcard_reasons(names: _Names, hyperpod: HyperPodTargets) -> dict[str, str]:
    """Why each wildcard resource cannot be narrower, keyed by the resource as the statements name it."""
    arn, where, run_scoped = names.arn, names.where, names.run_scoped
    reasons: dict[str, str] = {
        names.worker_roles: "Each run's own reward-worker role, <stem>-nf<run hash>-worker, created at provisioning "
        "(under the worker permissions boundary) and deleted at teardown.",
        names.run_tasks: "Task ids are generated at RunTask; the grant is limited to tasks of the reward-worker "
        "cluster.",
        "*": "ecs:ListTasks (conditioned on the reward cluster) and ecs:Describe/List/DeregisterTaskDefinition "
        "support no resource-level permissions.",
        f"{arn}:cloudformation:{where}:stack/{run_scoped}/*": "Per-run Nova Forge stacks are named "
        "<stem>-nf<run hash>-NovaForgeSDK at run time; the stack id suffix is generated.",
        f"{arn}:sqs:{where}:{run_scoped}": "Per-run queues of the deleted stack (named <stem>-nf*).",
        f"{arn}:lambda:{where}:function:{run_scoped}": "Per-run functions of the deleted stack (<stem>-nf*).",
        f"{arn}:dynamodb:{where}:table/{run_scoped}": "Per-run table of the deleted stack (<stem>-nf*).",
        f"{arn}:logs:{where}:log-group:/aws/lambda/{run_scoped}:*": "Log groups of the deleted per-run functions.",
        f"{arn}:logs:{where}:log-group:/aws/lambda/{run_scoped}": "Log groups of the deleted per-run functions "
        "(the name form of the log-group ARN).",
        f"{arn}:logs:{where}:log-group:/ecs/{run_scoped}": "The Nova Forge SDK's per-run task log group "
        "/ecs/<stem>-nf<run hash>-NovaForgeSDK, deleted at teardown.",
        f"{arn}:logs:{where}:log-group:/ecs/{run_scoped}:*": "The Nova Forge SDK's per-run task log group (the "
        "log-group ARN with its stream suffix).",
        f"{arn}:lambda:{where}:event-source-mapping:*": "Event source mappings have generated ids; conditioned on "
        "per-run functions (lambda:FunctionArn).",
    }
    for family in hyperpod.task_families:
        reasons[f"{arn}:ecs:{where}:task-definition/{family}:*"] = (
            f"Any revision of the {family} task definition (deploys add revisions)."
        )
    return reasons


def _reward_task_statements(names: _Names, hyperpod: HyperPodTargets) -> list[iam.PolicyStatement]:
    """The reward-worker and Nova Forge runner tasks on the reward cluster."""
    arn, where = names.arn, names.where
    return [
        iam.PolicyStatement(
            sid="StartRunTasks",  # RunTask of reward workers and the Nova Forge runner
            actions=["ecs:RunTask"],
            resources=[f"{arn}:ecs:{where}:task-definition/{family}:*" for family in hyperpod.task_families],
            conditions=names.on_reward_cluster,
        ),
        iam.PolicyStatement(
            sid="TagRunTasksAtLaunch",  # RunTask(tags=mtrl:run-id)
            actions=["ecs:TagResource"],
            resources=[names.run_tasks],
            conditions={"StringEquals": {"ecs:CreateAction": "RunTask"}},
        ),
        iam.PolicyStatement(
            sid="WatchAndStopRunTasks",  # DescribeTasks, StopTask
            actions=["ecs:DescribeTasks", "ecs:StopTask"],
            resources=[names.run_tasks],
            conditions=names.on_reward_cluster,
        ),
        iam.PolicyStatement(
            sid="ListRunTasks",  # ListTasks(startedBy=…)
            actions=["ecs:ListTasks"],
            resources=["*"],
            conditions=names.on_reward_cluster,
        ),
        iam.PolicyStatement(
            sid="TaskDefinitions",  # preflight DescribeTaskDefinition; cleanup of the SDK's SAM task definitions
            actions=[
                "ecs:DescribeTaskDefinition",
                "ecs:ListTaskDefinitions",
                "ecs:DeregisterTaskDefinition",
            ],
            resources=["*"],
        ),
        iam.PolicyStatement(
            sid="PassTaskRolesToEcs",
            actions=["iam:PassRole"],
            resources=hyperpod.task_role_arns,
            conditions={"StringEquals": {"iam:PassedToService": ECS_TASKS}},
        ),
    ]


def _worker_role_statements(names: _Names, hyperpod: HyperPodTargets) -> list[iam.PolicyStatement]:
    """The run's worker role (mtrl/backends/hyperpod/worker_role.py): created and granted only under the deploy-time
    boundary (IAM User Guide, "Permissions boundaries for IAM entities": delegating role creation with the
    iam:PermissionsBoundary condition), with only the deploy-time base policy attached."""
    under_boundary = {"StringEquals": {"iam:PermissionsBoundary": hyperpod.worker_run_boundary_arn}}
    return [
        iam.PolicyStatement(
            sid="CreateRunWorkerRoleUnderTheBoundary",  # CreateRole, PutRolePolicy
            actions=["iam:CreateRole", "iam:PutRolePolicy"],
            resources=[names.worker_roles],
            conditions=under_boundary,
        ),
        iam.PolicyStatement(
            sid="AttachTheWorkerBasePolicy",  # AttachRolePolicy
            actions=["iam:AttachRolePolicy"],
            resources=[names.worker_roles],
            conditions={
                **under_boundary,
                "ArnEquals": {"iam:PolicyARN": hyperpod.worker_base_policy_arn},
            },
        ),
        iam.PolicyStatement(
            sid="RemoveRunWorkerRole",  # GetRole, DeleteRolePolicy, DetachRolePolicy, DeleteRole
            actions=["iam:GetRole", "iam:DeleteRolePolicy", "iam:DetachRolePolicy", "iam:DeleteRole"],
            resources=[names.worker_roles],
        ),
        iam.PolicyStatement(
            sid="PassRunWorkerRoleToEcs",  # RunTask(overrides.taskRoleArn=<the run's worker role>)
            actions=["iam:PassRole"],
            resources=[names.worker_roles],
            conditions={"StringEquals": {"iam:PassedToService": ECS_TASKS}},
        ),
    ]


def _per_run_stack_cleanup_statements(names: _Names) -> list[iam.PolicyStatement]:
    """Teardown of a Nova Forge run's per-run stack (``<stem>-nf*``) and what its deletion deletes."""
    arn, where, run_scoped = names.arn, names.where, names.run_scoped
    return [
        iam.PolicyStatement(
            sid="PerRunStacks",  # DescribeStacks, DescribeStackEvents, DeleteStack in cleanup
            actions=[
                "cloudformation:DescribeStacks",
                "cloudformation:DescribeStackEvents",
                "cloudformation:DeleteStack",
            ],
            resources=[f"{arn}:cloudformation:{where}:stack/{run_scoped}/*"],
        ),
        # DeleteStack runs with the caller's permissions: deleting the per-run stack deletes its resources.
        iam.PolicyStatement(
            sid="DeletePerRunStackResources",
            actions=[
                "sqs:DeleteQueue",
                "sqs:GetQueueAttributes",
                "lambda:DeleteFunction",
                "lambda:GetFunction",
                "lambda:RemovePermission",
                "lambda:DeleteFunctionUrlConfig",
                "dynamodb:DeleteTable",
                "dynamodb:DescribeTable",
                "logs:DeleteLogGroup",
            ],
            resources=[
                f"{arn}:sqs:{where}:{run_scoped}",
                f"{arn}:lambda:{where}:function:{run_scoped}",
                f"{arn}:dynamodb:{where}:table/{run_scoped}",
                f"{arn}:logs:{where}:log-group:/aws/lambda/{run_scoped}",
                f"{arn}:logs:{where}:log-group:/aws/lambda/{run_scoped}:*",
                # The SDK's /ecs/<base>-NovaForgeSDK, created by setup() outside the stack (cleanup deletes it).
                f"{arn}:logs:{where}:log-group:/ecs/{run_scoped}",
                f"{arn}:logs:{where}:log-group:/ecs/{run_scoped}:*",
            ],
        ),
        iam.PolicyStatement(
            sid="DeletePerRunEventSourceMappings",
            actions=["lambda:DeleteEventSourceMapping", "lambda:GetEventSourceMapping"],
            resources=[f"{arn}:lambda:{where}:event-source-mapping:*"],
            conditions={"ArnLike": {"lambda:FunctionArn": f"{arn}:lambda:{where}:function:{run_scoped}"}},
        ),
    ]


def hyperpod_statements(stack: cdk.Stack, prefix: str, hyperpod: HyperPodTargets) -> PolicyParts:
    """The statements of the hyperpod adapter's calls, with why each wildcard resource cannot be narrower."""
    names = _Names.of(stack, prefix, hyperpod)
    # The restricted group's scaling, as verl states the training group's (stacks.backends.permissions).
    group, group_reasons = cluster_group_statements(stack, hyperpod.hyperpod_cluster_arn, hyperpod.node_role_arn)
    statements = [
        *group,
        *_reward_task_statements(names, hyperpod),
        *_worker_role_statements(names, hyperpod),
        *_per_run_stack_cleanup_statements(names),
    ]
    return statements, {**group_reasons, **_wildcard_reasons(names, hyperpod)}
