"""The pipeline's Lambda functions, each with its own least-privilege role."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mtrl.runs.health_poll import METRIC_NAMESPACE as HEALTH_METRIC_NAMESPACE
from mtrl.runs.manifest import EVAL_DATA_PREFIX
from mtrl.runs.runtime import ENV_BUCKET, ENV_TABLE
from mtrl.settings.pipeline import PIPELINE_SETTINGS_ENV, PipelineSettings, pipeline_settings_json
from stacks.constructs.data_store import RUNS_PREFIX, TRAINING_DATA_PREFIX
from stacks.constructs.kubernetes_access import KubernetesApiAccess, KubernetesClientPlacement
from stacks.constructs.python_function import PythonFunction
from stacks.nag import acknowledge

TABLE_ACTIONS = [
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:Query",
]
# What DynamoDB (customer-managed key), S3 SSE-KMS and the KMS-encrypted topic need from a caller.
KEY_ACTIONS = ["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:DescribeKey"]

# The validator is single-threaded and CPU-bound, and Lambda's CPU share grows with memory up to one full vCPU at
# 1,769 MB (AWS Lambda Developer Guide, "Configure Lambda function memory"): less slows Validate in proportion, more
# adds only cores it cannot use. Its memory stays far below that (docs/operations.md, benchmarks/bench_validation.py).
VALIDATE_MEMORY_MB = 1769


class PipelineFunction(Construct):
    """One pipeline function: a role of its own (no managed policies) and the PythonFunction."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        handler_dir: str,
        description: str,
        prefix: str,
        key: kms.IKey,
        table: dynamodb.ITable,
        bucket: s3.IBucket,
        bucket_arn: str,
        settings: PipelineSettings,
        log_retention_days: int,
        timeout: cdk.Duration,
        memory_size: int = 512,
        with_dependency_layer: bool = True,
        table_actions: Sequence[str] = TABLE_ACTIONS,
        table_resources: Sequence[str] | None = None,
        environment: Mapping[str, str] | None = None,
        kubernetes_access: KubernetesApiAccess | None = None,
    ) -> None:
        """``kubernetes_access``: the function calls the Kubernetes API of the cluster this deployment creates, so
        it runs in the VPC's private subnets and reaches the cluster's private endpoint (kubernetes_access.py)."""
        super().__init__(scope, id_)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"{prefix} pipeline function {handler_dir}",
        )
        self.placement = (
            KubernetesClientPlacement(
                self, "KubernetesApi", access=kubernetes_access, client=f"{prefix} pipeline function {handler_dir}"
            )
            if kubernetes_access is not None
            else None
        )
        self.wrapped = PythonFunction(
            self,
            "Fn",
            handler_dir=handler_dir,
            description=description,
            encryption_key=key,
            log_retention_days=log_retention_days,
            log_group_name=f"/{prefix}/pipeline/{handler_dir}",
            environment={
                ENV_TABLE: table.table_name,
                ENV_BUCKET: bucket.bucket_name,
                PIPELINE_SETTINGS_ENV: pipeline_settings_json(settings),
                **(environment or {}),
            },
            timeout=timeout,
            memory_size=memory_size,
            role=self.role,
            with_dependency_layer=with_dependency_layer,
            placement=self.placement,
        )
        self.function: lambda_.Function = self.wrapped.function
        if self.placement is not None:
            self.placement.attach(self.function, self.role)
        log_group = self.wrapped.log_group
        self.policy = iam.Policy(
            self,
            "Policy",
            statements=[
                iam.PolicyStatement(
                    sid="WriteOwnLogs",
                    actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                    resources=[log_group.log_group_arn],  # "<group>:*": stream names are picked at run time
                ),
                iam.PolicyStatement(
                    sid="RunTable", actions=list(table_actions), resources=list(table_resources or [table.table_arn])
                ),
                iam.PolicyStatement(sid="DataKey", actions=KEY_ACTIONS, resources=[key.key_arn]),
            ],
        )
        self.policy.attach_to_role(self.role)
        self.function.node.add_dependency(self.policy)
        self._bucket_arn = bucket_arn
        self._acknowledged: set[str] = set()
        acknowledge(
            self.policy,
            iam5_resource_finding(self, log_group.log_group_arn),
            "Lambda names its log streams at run time; the grant is limited to this function's own log group.",
        )

    def acknowledge_generated_grants(self) -> None:
        """Acknowledge the wildcards CDK itself adds to the role's default policy (call after all wiring)."""
        policy = self.role.node.try_find_child("DefaultPolicy")
        if policy is None:
            return
        # Active tracing adds xray:PutTraceSegments/PutTelemetryRecords, which have no resource-level support.
        acknowledge(
            policy, "AwsSolutions-IAM5[Resource::*]", "X-Ray trace upload supports no resource-level permissions."
        )
        cfn_policy = policy.node.default_child
        assert isinstance(cfn_policy, iam.CfnPolicy)
        rendered = json.dumps(cdk.Stack.of(self).resolve(cfn_policy.policy_document))
        for action in ("kms:GenerateDataKey*", "kms:ReEncrypt*"):
            if action in rendered:
                acknowledge(
                    policy,
                    f"AwsSolutions-IAM5[Action::{action}]",
                    "CDK's SQS send grant for the on-failure queue, which is encrypted with the data key.",
                )

    def allow_read(self, *prefixes: str) -> None:
        for prefix in prefixes:
            self._bucket_statement("s3:GetObject", "s3:GetObjectVersion", prefix=prefix, reason="reads")

    def allow_write(self, *prefixes: str, multipart: bool = False) -> None:
        """``multipart``: the function also abandons the multipart uploads it started (s3:PutObject covers the
        others: CreateMultipartUpload, UploadPart, CompleteMultipartUpload)."""
        actions = ("s3:PutObject", "s3:AbortMultipartUpload") if multipart else ("s3:PutObject",)
        for prefix in prefixes:
            self._bucket_statement(*actions, prefix=prefix, reason="writes")

    def _bucket_statement(self, *actions: str, prefix: str, reason: str) -> None:
        objects = f"{self._bucket_arn}/{prefix}*"
        self.policy.add_statements(iam.PolicyStatement(actions=list(actions), resources=[objects]))
        finding = iam5_resource_finding(self, objects)
        if finding not in self._acknowledged:
            self._acknowledged.add(finding)
            acknowledge(
                self.policy,
                finding,
                f"The function {reason} objects it cannot name in advance; the grant is limited to {prefix}.",
            )


def _render(value: Any) -> str:
    """A resolved CloudFormation value as cdk-nag prints it in finding ids."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((function, argument),) = value.items()
        if function == "Fn::Join":
            return str(argument[0]).join(_render(part) for part in argument[1])
        if function == "Fn::GetAtt":
            return f"<{argument[0]}.{argument[1]}>"
        if function == "Ref":
            return f"<{argument}>"
        if function == "Fn::ImportValue":
            return _render(argument)
    raise ValueError(f"cannot render {value!r} as a cdk-nag finding id")


def iam5_resource_finding(scope: Construct, resource: str) -> str:
    """The id of the AwsSolutions-IAM5 finding a wildcard ``resource`` raises (built, never hand-typed:
    it contains generated logical ids)."""
    return f"AwsSolutions-IAM5[Resource::{_render(cdk.Stack.of(scope).resolve(resource))}]"


class PipelineFunctions(Construct):
    """Attributes: ``trigger``, ``register``, ``acquire_slot``, ``validate``, ``backend``, ``report``, ``reaper``
    (each a ``PipelineFunction`` with ``.function`` and ``.role``), and ``capacity_guard`` once the pipeline stack
    adds it (None in a deployment without a HyperPod cluster)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        prefix: str,
        key: kms.IKey,
        table: dynamodb.ITable,
        bucket: s3.IBucket,
        bucket_arn: str,
        settings: PipelineSettings,
        log_retention_days: int,
        with_dependency_layer: bool = True,
        kubernetes_access: KubernetesApiAccess | None = None,
    ) -> None:
        """``bucket_arn`` must render to a stable value (e.g. an explicit import) so the acknowledgments of
        the prefix-scoped object grants can name it. ``kubernetes_access``: where the backend function runs when
        this deployment creates the EKS cluster (the verl adapter calls its API; kubernetes_access.py); the other
        functions never call Kubernetes and stay outside the VPC."""
        super().__init__(scope, id_)
        self._common: dict[str, Any] = {
            "prefix": prefix,
            "key": key,
            "table": table,
            "bucket": bucket,
            "bucket_arn": bucket_arn,
            "settings": settings,
            "log_retention_days": log_retention_days,
            "with_dependency_layer": with_dependency_layer,
        }
        make = self.make

        minute, quarter = cdk.Duration.minutes(1), cdk.Duration.minutes(15)
        self.trigger = make("Trigger", "trigger", "Upload → pipeline execution", minute)
        self.register = make("Register", "register", "Register a run", minute)
        self.acquire_slot = make("AcquireSlot", "acquire_slot", "Take a concurrency slot", minute)
        self.validate = make("Validate", "validate", "Validate a dataset (streamed)", quarter, VALIDATE_MEMORY_MB)
        self.backend = make(
            "Backend",
            "backend",
            "Backend phases via the run's adapter",
            quarter,
            1024,
            kubernetes_access=kubernetes_access,
        )
        self.report = make("Report", "report", "Run summary and notification", minute)
        self.reaper = make("Reaper", "reaper", "Teardown + report for aborted/timed-out executions", quarter)
        self.trigger.allow_read(TRAINING_DATA_PREFIX)
        self.validate.allow_read(TRAINING_DATA_PREFIX, EVAL_DATA_PREFIX)
        self.validate.allow_write(RUNS_PREFIX, multipart=True)  # an eval_split run's split files (streamed)
        self.backend.allow_read(TRAINING_DATA_PREFIX, EVAL_DATA_PREFIX, RUNS_PREFIX)
        self.backend.allow_write(RUNS_PREFIX)
        # The status poll publishes the training-health metric (mtrl.runs.health_poll).
        self.backend.policy.add_statements(
            iam.PolicyStatement(
                sid="RunHealthMetric",
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": HEALTH_METRIC_NAMESPACE}},
            )
        )
        # Serverless and hyperpod signal rows read the episode drivers' metrics back (mtrl.backends.episode_rows).
        self.backend.policy.add_statements(
            iam.PolicyStatement(sid="EpisodeMetricsRead", actions=["cloudwatch:GetMetricData"], resources=["*"])
        )
        acknowledge(
            self.backend.policy,
            "AwsSolutions-IAM5[Resource::*]",
            "cloudwatch:PutMetricData and cloudwatch:GetMetricData support no resource-level permissions (Service "
            "Authorization Reference); the cloudwatch:namespace condition limits PutMetricData to mtrl/RunHealth, "
            "and GetMetricData only reads metric values.",
        )
        self.report.allow_write(RUNS_PREFIX)
        self.reaper.allow_write(RUNS_PREFIX)

        self.capacity_guard: PipelineFunction | None = None  # PipelineStack.add_capacity_guard

    def make(
        self,
        id_: str,
        handler_dir: str,
        description: str,
        timeout: cdk.Duration,
        memory_size: int = 512,
        **options: Any,
    ) -> PipelineFunction:
        """A pipeline function with this pipeline's key, table, bucket, settings and log retention."""
        return PipelineFunction(
            self,
            id_,
            handler_dir=handler_dir,
            description=description,
            timeout=timeout,
            memory_size=memory_size,
            **self._common,
            **options,
        )

    @property
    def all(self) -> list[PipelineFunction]:
        fixed = [self.trigger, self.register, self.acquire_slot, self.validate, self.backend, self.report, self.reaper]
        return fixed + ([self.capacity_guard] if self.capacity_guard else [])
