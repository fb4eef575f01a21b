"""What the pipeline's backend function may do for the hyperpod, serverless and verl adapters — nothing more.

Every statement is derived from an AWS call of the ``mtrl.backends.hyperpod``, ``mtrl.backends.serverless`` or
``mtrl.backends.verl`` adapter (named in the statement's ``sid`` or its comment). Wildcards appear only for per-run
names (``<stem>-nf*``, see ``mtrl.backends.hyperpod.naming``; ``mtrl-*`` jobs; task ids) or for actions without
resource-level permissions; each is acknowledged with its reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct

from mtrl.backends.hyperpod.naming import run_name_pattern, worker_role_pattern
from mtrl.settings.verl import ECR_IMAGE, VerlModelSettings, model_sums_object
from stacks.nag import acknowledge, nag_resource

ECS_TASKS = "ecs-tasks.amazonaws.com"
SAGEMAKER = "sagemaker.amazonaws.com"
JOB_SAGEMAKER = "job.sagemaker.amazonaws.com"


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


@dataclass(frozen=True)
class ServerlessTargets:
    job_role_arn: str
    agent_function_arns: list[str]  # one per enabled environment
    mlflow_app_arn: str
    model_package_group_arn: str
    data_bucket_arn: str
    # The AgentCore runtimes runs may call: the deployment's own and those manifests may name (none: no statement).
    agent_runtime_arns: tuple[str, ...] = ()


def agent_runtime_resources(runtime_arns: Sequence[str]) -> list[str]:
    """IAM resources for invoking the listed AgentCore runtimes: each runtime and any of its endpoints."""
    return [resource for arn in runtime_arns for resource in (arn, f"{arn}/runtime-endpoint/*")]


def agent_runtime_log_group(runtime_arn: str) -> str:
    """The log groups of a runtime's endpoints: /aws/bedrock-agentcore/runtimes/<runtime id>-<qualifier>."""
    region, account, resource = runtime_arn.split(":")[3:6]
    partition = runtime_arn.split(":")[1]
    runtime_id = resource.removeprefix("runtime/")
    return f"arn:{partition}:logs:{region}:{account}:log-group:/aws/bedrock-agentcore/runtimes/{runtime_id}-*"


@dataclass(frozen=True)
class VerlTargets:
    """What a verl run touches besides the HyperPod group: the EKS cluster whose API it calls (endpoint and CA), and
    what Preflight checks exists: each configured model copy's SHA256SUMS object and the trainer image's repository."""

    eks_cluster_arn: str
    model_sums_object_arns: tuple[str, ...] = ()
    image_repository_arn: str | None = None  # only for an image in ECR

    @classmethod
    def of(cls, *, eks_cluster_arn: str, models: Sequence[VerlModelSettings], image_uri: str | None) -> VerlTargets:
        """The targets of the deployment's verl settings (``verl_models``, ``verl_image_uri``)."""
        sums = tuple(
            f"arn:{cdk.Aws.PARTITION}:s3:::{'/'.join(model_sums_object(model.s3_uri))}"
            for model in models
            if model.s3_uri is not None
        )
        found = ECR_IMAGE.match(image_uri or "")
        repository = (
            f"arn:{cdk.Aws.PARTITION}:ecr:{found['region']}:{found['account']}:repository/{found['repository']}"
            if found
            else None
        )
        return cls(eks_cluster_arn=eks_cluster_arn, model_sums_object_arns=sums, image_repository_arn=repository)


@dataclass(frozen=True)
class _Names:
    """The ARNs and name patterns the statements share, for one stack and deployment prefix."""

    arn: str  # arn:<partition>
    where: str  # <region>:<account>
    run_scoped: str  # every per-run Nova Forge name: <stem>-nf<hash>…
    reward_cluster_arn: str
    run_tasks: str
    cluster_resource: str
    worker_roles: str

    @classmethod
    def of(cls, stack: cdk.Stack, prefix: str, hyperpod: HyperPodTargets) -> _Names:
        arn = f"arn:{stack.partition}"
        where = f"{stack.region}:{stack.account}"
        return cls(
            arn=arn,
            where=where,
            run_scoped=run_name_pattern(prefix),
            reward_cluster_arn=f"{arn}:ecs:{where}:cluster/{hyperpod.reward_cluster_name}",
            run_tasks=f"{arn}:ecs:{where}:task/{hyperpod.reward_cluster_name}/*",
            cluster_resource=hyperpod.hyperpod_cluster_arn or f"{arn}:sagemaker:{where}:cluster/*",
            worker_roles=f"{arn}:iam::{stack.account}:role/{worker_role_pattern(prefix)}",
        )

    @property
    def on_reward_cluster(self) -> dict[str, Any]:
        return {"ArnEquals": {"ecs:cluster": self.reward_cluster_arn}}


def _wildcard_reasons(names: _Names, hyperpod: HyperPodTargets, serverless: ServerlessTargets) -> dict[str, str]:
    """Why each wildcard resource cannot be narrower, keyed by the resource as the statements name it."""
    arn, where, run_scoped = names.arn, names.where, names.run_scoped
    reasons: dict[str, str] = {
        names.worker_roles: "Each run's own reward-worker role, <stem>-nf<run hash>-worker, created at provisioning "
        "(under the worker permissions boundary) and deleted at teardown.",
        names.cluster_resource: "An existing HyperPod cluster's ARN ends in a service-generated id the configuration "
        "does not know; the actions only describe and scale clusters.",
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
        f"{arn}:sagemaker:{where}:job/*/mtrl-*": "Serverless job names are derived from run ids (mtrl-<run>, "
        "mtrl-eval-<run>, the baseline mtrl-base-<run>) in either job category.",
    }
    for runtime_arn in serverless.agent_runtime_arns:
        reasons[f"{runtime_arn}/runtime-endpoint/*"] = (
            "Any endpoint (qualifier) of a runtime the operator listed; smoke test only."
        )
        reasons[agent_runtime_log_group(runtime_arn)] = (
            "The smoke test reads the listed runtime's log group (/aws/bedrock-agentcore/runtimes/<runtime "
            "id>-<qualifier>) for the job runtime's answer."
        )
    for family in hyperpod.task_families:
        reasons[f"{arn}:ecs:{where}:task-definition/{family}:*"] = (
            f"Any revision of the {family} task definition (deploys add revisions)."
        )
    return reasons


# --- hyperpod (mtrl.backends.hyperpod) ------------------------------------------------------------------------


def _hyperpod_cluster_statements(names: _Names, hyperpod: HyperPodTargets) -> list[iam.PolicyStatement]:
    statements = [
        iam.PolicyStatement(
            sid="HyperPodScaleTrainingGroup",  # DescribeCluster/UpdateCluster/ListClusterNodes/ListClusterEvents
            actions=[
                "sagemaker:DescribeCluster",
                "sagemaker:UpdateCluster",
                "sagemaker:ListClusterNodes",
                "sagemaker:ListClusterEvents",
            ],
            resources=[names.cluster_resource],
        )
    ]
    if hyperpod.node_role_arn is not None:
        statements.append(
            iam.PolicyStatement(
                sid="PassNodeRoleOnUpdateCluster",  # UpdateCluster re-states the group's ExecutionRole
                actions=["iam:PassRole"],
                resources=[hyperpod.node_role_arn],
                conditions={"StringEquals": {"iam:PassedToService": SAGEMAKER}},
            )
        )
    return statements


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


# --- serverless (mtrl.backends.serverless) --------------------------------------------------------------------


def _serverless_statements(names: _Names, serverless: ServerlessTargets) -> list[iam.PolicyStatement]:
    statements = [
        iam.PolicyStatement(
            sid="ServerlessJobs",  # CreateJob (with Tags), DescribeJob, StopJob
            actions=["sagemaker:CreateJob", "sagemaker:DescribeJob", "sagemaker:StopJob", "sagemaker:AddTags"],
            resources=[f"{names.arn}:sagemaker:{names.where}:job/*/mtrl-*"],
        ),
        iam.PolicyStatement(
            sid="PassJobRoleToSageMaker",  # CreateJob(RoleArn=…)
            actions=["iam:PassRole"],
            resources=[serverless.job_role_arn],
            # The job role is assumed by job.sagemaker.amazonaws.com; which of the two principals CreateJob
            # reports as the pass target is not documented, so both (and only they) are allowed.
            conditions={"StringEquals": {"iam:PassedToService": [SAGEMAKER, JOB_SAGEMAKER]}},
        ),
        iam.PolicyStatement(
            sid="ServerlessPreflightJobRoleTrust",  # GetRole: trusts job.sagemaker.amazonaws.com + TagSession?
            actions=["iam:GetRole"],
            resources=[serverless.job_role_arn],
        ),
        iam.PolicyStatement(
            sid="ServerlessPreflightMlflow",  # DescribeMlflowApp
            actions=["sagemaker:DescribeMlflowApp"],
            resources=[serverless.mlflow_app_arn],
        ),
        iam.PolicyStatement(
            sid="ServerlessPreflightModelPackages",  # DescribeModelPackageGroup
            actions=["sagemaker:DescribeModelPackageGroup"],
            resources=[serverless.model_package_group_arn],
        ),
        iam.PolicyStatement(
            sid="ServerlessPreflightBucketRegion",  # GetBucketLocation
            actions=["s3:GetBucketLocation"],
            resources=[serverless.data_bucket_arn],
        ),
        iam.PolicyStatement(
            sid="ServerlessAgentSmokeTest",  # Invoke with a fake job ARN of this account
            actions=["lambda:InvokeFunction"],
            resources=list(serverless.agent_function_arns),
        ),
    ]
    if serverless.agent_runtime_arns:  # only the listed runtimes (issue 20 item 6)
        statements += [
            iam.PolicyStatement(
                sid="ServerlessAgentCoreSmokeTest",  # InvokeAgentRuntime with a fake job ARN of this account
                actions=["bedrock-agentcore:InvokeAgentRuntime"],
                resources=agent_runtime_resources(serverless.agent_runtime_arns),
            ),
            iam.PolicyStatement(
                sid="ServerlessAgentCoreSmokeTestLogs",  # FilterLogEvents: the runtime's answer to the agent
                actions=["logs:FilterLogEvents"],
                resources=[agent_runtime_log_group(runtime) for runtime in serverless.agent_runtime_arns],
            ),
        ]
    return statements


# --- verl (mtrl.backends.verl) ----------------------------------------------------------------------------------


def _verl_statements(verl: VerlTargets) -> list[iam.PolicyStatement]:
    # The Kubernetes calls themselves are authorised by the cluster's access entry (RBAC), not IAM.
    statements = [
        iam.PolicyStatement(
            sid="VerlReadClusterEndpoint", actions=["eks:DescribeCluster"], resources=[verl.eks_cluster_arn]
        )
    ]
    if verl.model_sums_object_arns:  # GetObject: the copy's pinned SHA256SUMS, nothing else of the bucket
        statements.append(
            iam.PolicyStatement(
                sid="VerlPreflightModelCopies",
                actions=["s3:GetObject"],
                resources=list(verl.model_sums_object_arns),
            )
        )
    if verl.image_repository_arn is not None:  # DescribeImages: the pinned digest or tag exists
        statements.append(
            iam.PolicyStatement(
                sid="VerlPreflightImage", actions=["ecr:DescribeImages"], resources=[verl.image_repository_arn]
            )
        )
    return statements


class BackendPermissions(Construct):
    """An inline policy on ``role`` (the pipeline's backend function role). Attribute: ``policy``."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        role: iam.IRole,
        prefix: str,
        hyperpod: HyperPodTargets,
        serverless: ServerlessTargets,
        verl: VerlTargets | None = None,
    ) -> None:
        super().__init__(scope, id_)
        names = _Names.of(cdk.Stack.of(self), prefix, hyperpod)
        statements = [
            *_hyperpod_cluster_statements(names, hyperpod),
            *_reward_task_statements(names, hyperpod),
            *_worker_role_statements(names, hyperpod),
            *_per_run_stack_cleanup_statements(names),
            *_serverless_statements(names, serverless),
            *(_verl_statements(verl) if verl is not None else []),
        ]
        self.policy = iam.Policy(self, "Policy", statements=statements)
        role.attach_inline_policy(self.policy)
        self._acknowledge_wildcards(statements, _wildcard_reasons(names, hyperpod, serverless))

    def _acknowledge_wildcards(self, statements: Sequence[iam.PolicyStatement], reasons: dict[str, str]) -> None:
        """One IAM5 acknowledgment per wildcard resource, with its documented reason (none: a synth error)."""
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
