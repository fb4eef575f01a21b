"""Run notifications and pipeline alarms on one KMS-encrypted SNS topic, plus the pipeline dashboard."""

from __future__ import annotations

from collections.abc import Mapping

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from mtrl.runs.health_poll import DEPLOYMENT_DIMENSION, METRIC_NAME, METRIC_NAMESPACE


def alarm_name_pattern(prefix: str) -> str:
    """Every alarm of a deployment is named ``<prefix>-…``; the topic admits CloudWatch for exactly those."""
    return f"{prefix}-*"


class PipelineTopic(Construct):
    """Attribute: ``topic`` (run notifications and alarms).

    Publishers: the report, reaper and capacity-guard functions (their roles grant ``sns:Publish``) and CloudWatch
    alarms. A topic policy replaces SNS's default one, so CloudWatch must be allowed in it explicitly, and the data
    key must let it encrypt (the data stack's key policy grants CloudWatch ``kms:Decrypt``/``GenerateDataKey*``).
    """

    def __init__(self, scope: Construct, id_: str, *, prefix: str, key: kms.IKey, alert_email: str | None) -> None:
        super().__init__(scope, id_)
        stack = cdk.Stack.of(self)
        self.topic = sns.Topic(
            self,
            "Topic",
            topic_name=f"{prefix}-runs",
            display_name=f"{prefix} training runs",
            master_key=key,
            enforce_ssl=True,
        )
        # Amazon SNS Developer Guide, "Amazon SNS access control case examples" / "Preventing cross-service confused
        # deputy": CloudWatch publishes as cloudwatch.amazonaws.com, limited here to this account's alarms.
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {
                        "aws:SourceArn": stack.format_arn(
                            service="cloudwatch",
                            resource="alarm",
                            resource_name=alarm_name_pattern(prefix),
                            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
                        )
                    },
                },
            )
        )
        if alert_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(alert_email))


class PipelineAlarms(Construct):
    """Alarms on failed, timed-out and aborted executions, trigger errors and DLQ depth; the dashboard."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        prefix: str,
        topic: sns.ITopic,
        state_machine: sfn.StateMachine,
        trigger: lambda_.IFunction,
        functions: Mapping[str, lambda_.IFunction],
        queues: Mapping[str, sqs.IQueue],
    ) -> None:
        super().__init__(scope, id_)
        period = cdk.Duration.minutes(5)
        self._prefix = prefix
        self._action = cw_actions.SnsAction(topic)
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        alarm = self.add

        alarm(
            "executions-failed",
            state_machine.metric_failed(period=period, statistic="Sum"),
            "A training run failed (its notification names the step and the cause).",
        )
        alarm(
            "executions-timed-out",
            state_machine.metric_timed_out(period=period, statistic="Sum"),
            "A training-run execution hit the state machine's backstop timeout (the reaper tears it down).",
        )
        alarm(
            "executions-aborted",
            state_machine.metric_aborted(period=period, statistic="Sum"),
            "A training-run execution was stopped by hand (the reaper tears it down).",
        )
        alarm(
            "trigger-errors",
            trigger.metric_errors(period=period, statistic="Sum"),
            "The upload trigger failed; an upload may not have started its run (see the trigger DLQs).",
        )
        # One alarm per deployment on the status poll's training-health metric (its per-deployment series):
        # any run at warn (1) or stop (2). The poll itself notifies once per run and rule with the details.
        alarm(
            "run-health",
            cloudwatch.Metric(
                namespace=METRIC_NAMESPACE,
                metric_name=METRIC_NAME,
                dimensions_map={DEPLOYMENT_DIMENSION: prefix},
                period=period,
                statistic="Maximum",
            ),
            "A training-health rule fired on a run (warn or stop): its notification, mtrl status and "
            "runs/<run-id>/health.json name the rule (docs/operations.md, Training health).",
        )
        for name, queue in queues.items():
            alarm(
                f"{name}-dlq-depth",
                queue.metric_approximate_number_of_messages_visible(period=period, statistic="Maximum"),
                f"Events are waiting in the {name} dead-letter queue: these uploads/executions were not handled.",
            )

        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=f"{prefix}-pipeline")
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Training runs (executions)",
                left=[
                    state_machine.metric_started(period=period, statistic="Sum"),
                    state_machine.metric_succeeded(period=period, statistic="Sum"),
                    state_machine.metric_failed(period=period, statistic="Sum"),
                    state_machine.metric_timed_out(period=period, statistic="Sum"),
                    state_machine.metric_aborted(period=period, statistic="Sum"),
                ],
                width=12,
            ),
            cloudwatch.AlarmStatusWidget(title="Pipeline alarms", alarms=list(self.alarms.values()), width=12),
        )
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Function errors",
                left=[fn.metric_errors(period=period, statistic="Sum", label=name) for name, fn in functions.items()],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Function duration (p95)",
                left=[fn.metric_duration(period=period, statistic="p95", label=name) for name, fn in functions.items()],
                width=12,
            ),
        )
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Dead-letter queues",
                left=[
                    queue.metric_approximate_number_of_messages_visible(period=period, statistic="Maximum", label=name)
                    for name, queue in queues.items()
                ],
                width=24,
            )
        )

    def add(self, name: str, metric: cloudwatch.IMetric, description: str) -> cloudwatch.Alarm:
        """An alarm ``<prefix>-pipeline-<name>`` on ≥ 1 in a period (missing data is fine) that notifies the topic."""
        created = cloudwatch.Alarm(
            self,
            name,
            alarm_name=f"{self._prefix}-pipeline-{name}",
            alarm_description=description,
            metric=metric,
            threshold=1,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        created.add_alarm_action(self._action)
        self.alarms[name] = created
        return created
