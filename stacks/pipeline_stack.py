"""Pipeline stack: upload trigger, phase functions, the run state machine, notifications, alarms, dashboard."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mtrl.runs.capacity_guard import ENV_GUARDED_CLUSTER, ENV_GUARDED_GROUPS
from mtrl.runs.runtime import (
    ENV_BACKEND_FUNCTION,
    ENV_BACKEND_SETTINGS,
    ENV_DEPLOYMENT,
    ENV_STATE_MACHINE,
    ENV_TOPIC,
)
from mtrl.settings import DeploySettings
from stacks.constructs.data_store import RUN_TABLE_LISTING_INDEX
from stacks.constructs.kubernetes_access import KubernetesApiAccess
from stacks.constructs.pipeline_alerts import PipelineAlarms, PipelineTopic
from stacks.constructs.pipeline_events import PipelineEvents
from stacks.constructs.pipeline_functions import PipelineFunction, PipelineFunctions
from stacks.constructs.pipeline_state_machine import PipelineStateMachine
from stacks.nag import acknowledge, nag_resource

# How often the GPU safety net looks for GPU groups left above their idle count.
CAPACITY_GUARD_INTERVAL = cdk.Duration.minutes(15)


@jsii.implements(cdk.IStableStringProducer)
class _JsonProducer:
    """Renders the backends' values at synth time, after every backend's stack side has added its own."""

    def __init__(self, stack: cdk.Stack, values: dict[str, dict[str, Any]]) -> None:
        self._stack = stack
        self._values = values

    def produce(self) -> str:
        return self._stack.to_json_string(self._values)


class PipelineStack(cdk.Stack):
    """Backends extend it through ``backend.role`` (permissions) and ``add_backend_values`` (configuration)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        settings: DeploySettings,
        key: kms.IKey,
        bucket: s3.IBucket,
        table: dynamodb.ITable,
        kubernetes_access: KubernetesApiAccess | None = None,
        **kwargs: Any,
    ) -> None:
        """``kubernetes_access``: the VPC place of the backend function when the deployment creates the EKS
        cluster (stacks/constructs/kubernetes_access.py); None leaves every function outside the VPC."""
        super().__init__(scope, id_, **kwargs)
        prefix = settings.prefix
        self._prefix = prefix
        self._table = table
        # An explicitly named export: policies on bucket prefixes then render to a stable, acknowledgeable id.
        export_name = f"{prefix}-data-bucket-arn"
        cdk.Stack.of(bucket).export_value(bucket.bucket_arn, name=export_name)
        self.functions = PipelineFunctions(
            self,
            "Functions",
            prefix=prefix,
            key=key,
            table=table,
            bucket=bucket,
            bucket_arn=cdk.Fn.import_value(export_name),
            settings=settings,
            log_retention_days=settings.log_retention_days,
            with_dependency_layer=not settings.emulator,
            kubernetes_access=kubernetes_access,
        )
        fns = self.functions
        self.topic = PipelineTopic(
            self, "Notifications", prefix=prefix, key=key, alert_email=settings.alert_email
        ).topic
        self.machine = PipelineStateMachine(
            self,
            "Run",
            prefix=prefix,
            settings=settings,
            functions={
                "RegisterFunctionArn": fns.register.function,
                "AcquireSlotFunctionArn": fns.acquire_slot.function,
                "ValidateFunctionArn": fns.validate.function,
                "BackendFunctionArn": fns.backend.function,
                "ReportFunctionArn": fns.report.function,
            },
            key=key,
            log_retention_days=settings.log_retention_days,
        )
        state_machine = self.machine.state_machine
        fns.trigger.function.add_environment(ENV_STATE_MACHINE, state_machine.state_machine_arn)
        fns.trigger.policy.add_statements(
            iam.PolicyStatement(actions=["states:StartExecution"], resources=[state_machine.state_machine_arn])
        )
        for publisher in (fns.report, fns.reaper, fns.backend):  # backend: the status poll's health notices
            publisher.function.add_environment(ENV_TOPIC, self.topic.topic_arn)
            publisher.policy.add_statements(
                iam.PolicyStatement(actions=["sns:Publish"], resources=[self.topic.topic_arn])
            )
        fns.reaper.function.add_environment(ENV_BACKEND_FUNCTION, fns.backend.function.function_name)
        fns.reaper.policy.add_statements(
            iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[fns.backend.function.function_arn])
        )
        self._backend_values: dict[str, dict[str, Any]] = {}
        fns.backend.function.add_environment(
            ENV_BACKEND_SETTINGS, cdk.Lazy.string(_JsonProducer(self, self._backend_values))
        )
        fns.backend.function.add_environment(ENV_DEPLOYMENT, prefix)
        self.events = PipelineEvents(
            self,
            "Events",
            prefix=prefix,
            bucket=bucket,
            state_machine=state_machine,
            trigger=fns.trigger.function,
            reaper=fns.reaper.function,
            key=key,
        )
        self.alarms = PipelineAlarms(
            self,
            "Alarms",
            prefix=prefix,
            topic=self.topic,
            state_machine=state_machine,
            trigger=fns.trigger.function,
            functions={fn.node.id: fn.function for fn in fns.all},
            queues=self.events.queues,
        )
        for function in fns.all:
            function.acknowledge_generated_grants()
        self.capacity_guard_rule: events.Rule | None = None
        cdk.CfnOutput(self, "StateMachineArn", value=state_machine.state_machine_arn)
        cdk.CfnOutput(self, "NotificationTopicArn", value=self.topic.topic_arn)
        cdk.CfnOutput(self, "DashboardName", value=f"{prefix}-pipeline")
        # The CLI's `mtrl logs` reads these (comma-separated: every function's log group, then the state machine's).
        cdk.CfnOutput(
            self,
            "LogGroupNames",
            value=cdk.Fn.join(
                ",",
                [fn.wrapped.log_group.log_group_name for fn in fns.all] + [self.machine.log_group.log_group_name],
            ),
        )

    @property
    def backend(self) -> PipelineFunction:
        """The function that runs every backend phase (preflight … teardown); grant backend permissions to
        ``backend.role`` / ``backend.policy``."""
        return self.functions.backend

    def add_backend_values(self, backend: str, values: Mapping[str, Any]) -> None:
        """Ship a backend's deploy-time values (JSON: names and ARNs, numbers, booleans, lists) to its adapter: a run of
        that backend gets them in RunContext.settings, merged with its own settings."""
        if backend in self._backend_values:
            raise ValueError(f"the values of backend '{backend}' are already added")
        self._backend_values[backend] = dict(values)

    def add_capacity_guard(
        self, *, cluster_name: str, cluster_arn: str | None, node_role_arn: str | None, idle_counts: dict[str, int]
    ) -> PipelineFunction:
        """The GPU safety net (``mtrl.runs.capacity_guard``): every CAPACITY_GUARD_INTERVAL, scale back
        each group of ``idle_counts`` that is above its idle count while no live run holds it, and alert on the topic.

        ``cluster_arn`` None = an existing cluster (its ARN ends in an id the configuration does not know);
        ``node_role_arn`` is the groups' execution role, which ``UpdateCluster`` re-states (a PassRole).
        """
        if self.functions.capacity_guard is not None:
            raise ValueError("the capacity guard is already added")
        if not idle_counts:
            raise ValueError("the capacity guard needs at least one instance group to watch")
        guard = self.functions.make(
            "CapacityGuard",
            "capacity_guard",
            "GPU safety net: scale back GPU groups above idle that no live run holds",
            cdk.Duration.minutes(5),
            # It only reads runs: the listing index, then (below) single run items.
            table_actions=["dynamodb:Query"],
            table_resources=[f"{self._table.table_arn}/index/{RUN_TABLE_LISTING_INDEX}"],
            environment={
                ENV_TOPIC: self.topic.topic_arn,
                ENV_GUARDED_CLUSTER: cluster_name,
                ENV_GUARDED_GROUPS: json.dumps(idle_counts, sort_keys=True),
            },
        )
        self.functions.capacity_guard = guard
        cluster_resource = cluster_arn or self.format_arn(service="sagemaker", resource="cluster", resource_name="*")
        guard.policy.add_statements(
            iam.PolicyStatement(
                # A group that looks unheld in the (eventually consistent) index is confirmed against each live run's
                # item with a strongly consistent GetItem; run items only (pk RUN#<id>), never the slot items.
                sid="ConfirmHoldersConsistently",
                actions=["dynamodb:GetItem"],
                resources=[self._table.table_arn],
                conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["RUN#*"]}},
            ),
        )
        guard.policy.add_statements(
            iam.PolicyStatement(
                sid="ScaleBackGpuGroups",  # GpuCapacity.describe / GpuCapacity.scale
                actions=["sagemaker:DescribeCluster", "sagemaker:UpdateCluster"],
                resources=[cluster_resource],
            ),
            iam.PolicyStatement(sid="Alert", actions=["sns:Publish"], resources=[self.topic.topic_arn]),
        )
        if node_role_arn is not None:
            guard.policy.add_statements(
                iam.PolicyStatement(
                    sid="PassNodeRoleOnUpdateCluster",  # UpdateCluster re-states the group's ExecutionRole
                    actions=["iam:PassRole"],
                    resources=[node_role_arn],
                    conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
                )
            )
        if cluster_arn is None:
            acknowledge(
                guard.policy,
                f"AwsSolutions-IAM5[Resource::{nag_resource(self, cluster_resource)}]",
                "An existing HyperPod cluster's ARN ends in a service-generated id the configuration does not know; "
                "the guard only describes the cluster and scales its watched groups.",
            )
        self.capacity_guard_rule = events.Rule(
            self,
            "CapacityGuardSchedule",
            rule_name=f"{self._prefix}-gpu-safety-net",
            description="Scale back GPU instance groups above their idle count that no live run holds",
            schedule=events.Schedule.rate(CAPACITY_GUARD_INTERVAL),
        )
        # A missed check is made up by the next one: no retries beyond the interval, no dead-letter queue.
        self.capacity_guard_rule.add_target(
            targets.LambdaFunction(guard.function, retry_attempts=2, max_event_age=CAPACITY_GUARD_INTERVAL)
        )
        self.alarms.add(
            "capacity-guard-errors",
            guard.function.metric_errors(period=cdk.Duration.minutes(5), statistic="Sum"),
            "The GPU safety net failed: GPU groups left above their idle count may not be scaled back (see its log).",
        )
        guard.acknowledge_generated_grants()
        return guard
