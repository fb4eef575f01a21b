"""Reward workers on ECS Fargate: a service idling at 0 tasks that a run scales up, with the weakest role
in the system (the tasks run user-supplied environment code)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mtrl.backends.hyperpod.naming import SDK_STACK_SUFFIX, WORKER_QUEUE_ACTIONS, run_name_pattern
from mtrl.settings.reward_workers import RewardWorkerSettings
from stacks.constructs.encrypted_log_group import EncryptedLogGroup
from stacks.constructs.fargate_task import acknowledge_image_pull_login, linux_task_definition, repo_image
from stacks.nag import acknowledge, nag_resource

DOCKERFILE = "docker/reward-worker/Dockerfile"
# The Docker build context is the repository root, reduced to what the Dockerfile copies.
IMAGE_CONTEXT_EXCLUDES = [
    "*",
    "!pyproject.toml",
    "!README.md",
    "!requirements",
    "!mtrl",
    "!environments",
    "!custom-environments",
    "!docker/reward-worker",
    "**/__pycache__",
    "**/*.pyc",
]
CONTAINER_NAME = "reward-worker"
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


def sandbox_linux_parameters(scope: Construct) -> ecs.LinuxParameters:
    parameters = ecs.LinuxParameters(scope, "WorkerLinuxParameters", init_process_enabled=True)
    parameters.drop_capabilities(*DROPPED_CAPABILITIES)
    return parameters


class RewardWorkers(Construct):
    """Attributes: ``cluster``, ``task_definition``, ``container``, ``service``, ``task_role``, ``log_group``,
    ``scalable_target``, ``max_tasks``, ``queue_name_prefix`` (a run's queues must be named with it),
    ``environment_prefix``. Metrics leave as CloudWatch EMF log lines, so the role needs no metrics API."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        settings: RewardWorkerSettings,
        prefix: str,
        vpc: ec2.IVpc,
        security_group: ec2.ISecurityGroup,
        data_bucket: s3.IBucket,
        encryption_key: kms.IKey,
        log_retention_days: int,
    ) -> None:
        super().__init__(scope, id_)
        self.max_tasks = settings.reward_worker_max_tasks
        # The run's queues and proxy belong to its Nova Forge stack: every name starts <stem>-nf (naming.py).
        self.queue_name_prefix = run_name_pattern(prefix).removesuffix("*")
        self._prefix = prefix
        self.environment_prefix = settings.reward_worker_environment_prefix

        self.cluster = ecs.Cluster(
            self,
            "Cluster",
            cluster_name=f"{prefix}-reward-workers",
            vpc=vpc,
            container_insights_v2=ecs.ContainerInsights.ENABLED,
        )
        self.log_group = EncryptedLogGroup(
            self,
            "Logs",
            log_group_name=f"/{prefix}/reward-workers",
            encryption_key=encryption_key,
            retention_days=log_retention_days,
        ).log_group

        self.task_role = self._task_role()
        self._grant_task_role(data_bucket, encryption_key)

        self._worker_task(settings, data_bucket)
        self.service = self._service(vpc, security_group)
        # The scaling limits a run works within (the pipeline sets counts inside [0, max_tasks]).
        self.scalable_target = self.service.auto_scale_task_count(min_capacity=0, max_capacity=self.max_tasks)

        acknowledge(
            self.task_definition,
            "AwsSolutions-ECS2",
            "The environment variables are non-secret settings (bucket name, prefixes, worker count); "
            "the workers hold no secrets.",
        )
        acknowledge_image_pull_login(self.task_definition)

    def _task_role(self) -> iam.Role:
        """The role the workers run with; what it may do is ``_grant_task_role``'s."""
        stack = cdk.Stack.of(self)
        return iam.Role(
            self,
            "TaskRole",
            # Only ECS tasks of this account may assume it (confused-deputy guard).
            assumed_by=iam.ServicePrincipal(
                "ecs-tasks.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {"aws:SourceArn": f"arn:{stack.partition}:ecs:{stack.region}:{stack.account}:*"},
                },
            ),
            description="Reward workers (run environment code): read environment packages, use the run's "
            "queues and call its proxy URL. Nothing else (logs and EMF metrics go through the awslogs driver).",
        )

    def _worker_task(self, settings: RewardWorkerSettings, data_bucket: s3.IBucket) -> None:
        """The task definition and its one container (``task_definition``, ``container``)."""
        arm = settings.reward_worker_architecture == "arm64"
        self.task_definition = linux_task_definition(
            self,
            family=f"{self._prefix}-reward-worker",
            cpu=settings.reward_worker_cpu,
            memory_limit_mib=settings.reward_worker_memory_mib,
            task_role=self.task_role,
            arm=arm,
        )
        self.container = self.task_definition.add_container(
            "Worker",
            container_name=CONTAINER_NAME,
            image=repo_image(DOCKERFILE, exclude=IMAGE_CONTEXT_EXCLUDES, arm=arm),
            logging=ecs.LogDrivers.aws_logs(stream_prefix="worker", log_group=self.log_group),
            # Hardening for the sandbox (docs/sandbox.md): a read-only root file system (writable: the /tmp
            # volume below), never privileged, and only the capabilities the sandbox's fargate tier needs as
            # root (switch to and signal throwaway uids, hand them their work directory).
            readonly_root_filesystem=True,
            privileged=False,
            linux_parameters=sandbox_linux_parameters(self),
            environment={
                # Read by mtrl.worker; per-run values (queues, env id, run id) come as container overrides.
                "MTRL_CONCURRENCY": str(settings.reward_worker_max_workers),
                "MTRL_DATA_BUCKET": data_bucket.bucket_name,
                "MTRL_ENVIRONMENT_PREFIX": self.environment_prefix,
                "MTRL_QUEUE_PREFIX": self.queue_name_prefix,
            },
        )

        self.task_definition.add_volume(name=SCRATCH_VOLUME)  # Fargate task storage, private to the task
        self.container.add_mount_points(
            ecs.MountPoint(container_path="/tmp", source_volume=SCRATCH_VOLUME, read_only=False)  # noqa: S108
        )

    def _service(self, vpc: ec2.IVpc, security_group: ec2.ISecurityGroup) -> ecs.FargateService:
        """The workers' service in the private subnets, idle (0 tasks) between runs."""
        return ecs.FargateService(
            self,
            "Service",
            service_name=f"{self._prefix}-reward-workers",
            cluster=self.cluster,
            task_definition=self.task_definition,
            # Idle between runs; a run sets the desired count and sets it back to 0 at teardown.
            desired_count=0,
            min_healthy_percent=0,
            max_healthy_percent=200,
            assign_public_ip=False,
            # Isolated subnets in a deployment without a NAT gateway: no hyperpod run (the only user) runs there.
            vpc_subnets=ec2.SubnetSelection(subnets=vpc.private_subnets or vpc.isolated_subnets),
            security_groups=[security_group],
            circuit_breaker=ecs.DeploymentCircuitBreaker(enable=True, rollback=True),
            enable_execute_command=False,
            propagate_tags=ecs.PropagatedTagSource.SERVICE,
        )

    def _grant_task_role(self, data_bucket: s3.IBucket, key: kms.IKey) -> None:
        """Two deploy-time managed policies. ``base_policy`` (packages, the data key through S3/SQS) is attached to the
        shared task role and to every run's own worker role; ``run_boundary`` is the permissions boundary of those
        run roles: the most any run's worker may do (mtrl/backends/hyperpod/worker_role.py grants each run's role
        only its own queues and proxy inside it). The shared role itself reaches no run's queues or proxy."""
        stack = cdk.Stack.of(self)
        where = f"{stack.region}:{stack.account}"
        queues = f"arn:{stack.partition}:sqs:{where}:{self.queue_name_prefix}*"
        # The SDK's completion proxy: setup() switches its function URL to AuthType AWS_IAM, so workers sign with
        # SigV4 and need both actions (Lambda guide, "Control access to Lambda function URLs": URLs created since
        # October 2025 also check lambda:InvokeFunction, with lambda:InvokedViaFunctionUrl).
        proxy_name = f"{self.queue_name_prefix}*-{SDK_STACK_SUFFIX}-SageMaker-proxy"
        proxies = f"arn:{stack.partition}:lambda:{where}:function:{proxy_name}"
        bucket_arn = data_bucket.bucket_arn
        producer = cdk.Stack.of(data_bucket)
        if producer is not stack:
            # A named export keeps the ARN readable in the finding id (an automatic export ends in a hash).
            bucket_arn = producer.export_value(bucket_arn, name=f"{producer.stack_name}-DataBucketArn")
        packages = f"{bucket_arn}/{self.environment_prefix}*"

        def base() -> list[iam.PolicyStatement]:
            return [
                iam.PolicyStatement(
                    sid="ReadEnvironmentPackages",
                    actions=["s3:GetObject"],
                    resources=[packages],
                ),
                iam.PolicyStatement(
                    sid="ListEnvironmentPackages",
                    actions=["s3:ListBucket"],
                    resources=[bucket_arn],
                    conditions={"StringLike": {"s3:prefix": [f"{self.environment_prefix}*"]}},
                ),
                iam.PolicyStatement(
                    sid="DecryptThroughS3AndSqsOnly",
                    actions=["kms:Decrypt", "kms:GenerateDataKey"],
                    resources=[key.key_arn],
                    conditions={
                        "StringEquals": {
                            "kms:ViaService": [f"s3.{stack.region}.amazonaws.com", f"sqs.{stack.region}.amazonaws.com"]
                        }
                    },
                ),
            ]

        run_scope = [
            iam.PolicyStatement(sid="UseRunQueues", actions=list(WORKER_QUEUE_ACTIONS), resources=[queues]),
            iam.PolicyStatement(
                sid="CallRunProxyUrl",
                actions=["lambda:InvokeFunctionUrl"],
                resources=[proxies],
                conditions={"StringEquals": {"lambda:FunctionUrlAuthType": "AWS_IAM"}},
            ),
            iam.PolicyStatement(
                sid="CallRunProxyThroughItsUrl",
                actions=["lambda:InvokeFunction"],
                resources=[proxies],
                conditions={"Bool": {"lambda:InvokedViaFunctionUrl": "true"}},
            ),
        ]
        prefix = self._prefix
        self.base_policy = iam.ManagedPolicy(
            self,
            "WorkerBasePolicy",
            managed_policy_name=f"{prefix}-reward-worker-base",
            description="Reward workers: environment packages and the data key through S3/SQS (no run resources)",
            statements=base(),
        )
        self.task_role.add_managed_policy(self.base_policy)
        self.run_boundary = iam.ManagedPolicy(
            self,
            "RunWorkerBoundary",
            managed_policy_name=f"{prefix}-reward-worker-run-boundary",
            description="Boundary of each run's worker role: at most the base policy and run queues/proxies",
            statements=[*base(), *run_scope],
        )
        for policy, found in (
            (
                self.base_policy,
                ((packages, "Read of the environment-package prefix only (package names are chosen per run)."),),
            ),
            (
                self.run_boundary,
                (
                    (packages, "Read of the environment-package prefix only (package names are chosen per run)."),
                    (
                        queues,
                        "The boundary of per-run worker roles: any run's queues; each run's role is granted only "
                        "its own (worker_role.py).",
                    ),
                    (
                        proxies,
                        "The boundary of per-run worker roles: any run's proxy; each run's role is granted only "
                        "its own, through its IAM-auth URL.",
                    ),
                ),
            ),
        ):
            for resource, reason in found:
                acknowledge(policy, f"AwsSolutions-IAM5[Resource::{nag_resource(self, resource)}]", reason)
