"""Event wiring: uploads → trigger function, finished-but-unreported executions → reaper function.

Both targets are invoked asynchronously, so each has two safety nets (W12 in the reference notes):
a rule-target DLQ (events EventBridge could not deliver) and a Lambda on-failure destination (events
whose handler failed after its retries). Both queues are alarmed.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.constructs.data_store import TRAINING_DATA_PREFIX
from stacks.nag import acknowledge

DATASET_SUFFIX = ".jsonl"


def upload_event_pattern(bucket_name: str) -> dict[str, Any]:
    """The pattern of uploads that start runs (also used by tests, resolved from the template)."""
    return {
        "source": ["aws.s3"],
        "detail-type": ["Object Created"],
        "detail": {
            "bucket": {"name": [bucket_name]},
            # prefix AND suffix: a wildcard is the one matcher that expresses both.
            "object": {"key": [{"wildcard": f"{TRAINING_DATA_PREFIX}*{DATASET_SUFFIX}"}]},
        },
    }


class _DeadLetterQueue(Construct):
    def __init__(self, scope: Construct, id_: str, *, key: kms.IKey, what: str) -> None:
        super().__init__(scope, id_)
        self.queue = sqs.Queue(
            self,
            "Queue",
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=key,
            enforce_ssl=True,
            retention_period=cdk.Duration.days(14),
        )
        acknowledge(self.queue, "AwsSolutions-SQS3", f"This queue is itself the dead-letter queue for {what}.")


class _AsyncTarget(Construct):
    """An EventBridge rule → Lambda target with a delivery DLQ and an on-failure destination."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        rule: events.Rule,
        function: lambda_.IFunction,
        key: kms.IKey,
        what: str,
        retry_attempts: int,
    ) -> None:
        super().__init__(scope, id_)
        self.delivery_dlq = _DeadLetterQueue(self, "DeliveryDlq", key=key, what=f"{what} (undeliverable)").queue
        self.failure_dlq = _DeadLetterQueue(self, "FailureDlq", key=key, what=f"{what} (handler failed)").queue
        rule.add_target(
            targets.LambdaFunction(
                function,
                dead_letter_queue=self.delivery_dlq,
                retry_attempts=8,
                max_event_age=cdk.Duration.hours(24),
            )
        )
        lambda_.EventInvokeConfig(
            self,
            "AsyncConfig",
            function=function,
            on_failure=destinations.SqsDestination(self.failure_dlq),
            retry_attempts=retry_attempts,
            max_event_age=cdk.Duration.hours(6),
        )


class PipelineEvents(Construct):
    """Attributes: ``upload_rule``, ``finished_rule``, ``queues`` (name → DLQ)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        prefix: str,
        bucket: s3.IBucket,
        state_machine: sfn.IStateMachine,
        trigger: lambda_.IFunction,
        reaper: lambda_.IFunction,
        key: kms.IKey,
    ) -> None:
        super().__init__(scope, id_)
        pattern = upload_event_pattern(bucket.bucket_name)
        self.upload_rule = events.Rule(
            self,
            "UploadRule",
            rule_name=f"{prefix}-dataset-uploaded",
            description="A training-data/*.jsonl upload starts a training run",
            event_pattern=events.EventPattern(
                source=pattern["source"],
                detail_type=pattern["detail-type"],
                detail=pattern["detail"],
            ),
        )
        upload = _AsyncTarget(
            self, "Trigger", rule=self.upload_rule, function=trigger, key=key, what="uploads", retry_attempts=2
        )
        self.finished_rule = events.Rule(
            self,
            "UnreportedRule",
            rule_name=f"{prefix}-run-ended-abnormally",
            description="Aborted, timed-out or failed executions: the reaper tears down and reports if still due",
            event_pattern=events.EventPattern(
                source=["aws.states"],
                detail_type=["Step Functions Execution Status Change"],
                detail={
                    "stateMachineArn": [state_machine.state_machine_arn],
                    "status": ["ABORTED", "TIMED_OUT", "FAILED"],
                },
            ),
        )
        reap = _AsyncTarget(
            self, "Reaper", rule=self.finished_rule, function=reaper, key=key, what="ended executions", retry_attempts=2
        )
        self.queues = {
            "trigger-delivery": upload.delivery_dlq,
            "trigger-failure": upload.failure_dlq,
            "reaper-delivery": reap.delivery_dlq,
            "reaper-failure": reap.failure_dlq,
        }
