"""The status poll's training-health calls (mtrl.runs.health_poll: read signals.jsonl, write health.json, publish
mtrl/RunHealth, notify the run topic), recorded at botocore against moto, must each be allowed for the pipeline's
backend function role as synthesized. Names (bucket, topic, table) come from the function's deployed environment.
The run table's own DynamoDB calls are the registry's, shared by every phase, and not re-checked here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from mtrl.health.signals import SignalHeader, SignalRow, render_signals
from mtrl.runs.health_poll import poll_health, signals_key
from mtrl.runs.runtime import ENV_BUCKET, ENV_TABLE, ENV_TOPIC, Runtime
from mtrl.settings.pipeline import PipelineSettings
from tests.contract.iam_contract import AppModel, AwsCall, CallRecorder, assert_calls_allowed
from tests.contract.recorded_runs import BACKEND_FUNCTION, BACKEND_ROLE, model_account_aws
from tests.run_table import create_run_table

RUN_ID = "flat-20260101T000000Z-abcdef12"


@pytest.fixture
def recorded_poll(app_model: AppModel, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[AwsCall]]:
    deployed = app_model.function_environment(BACKEND_FUNCTION)
    bucket, table, topic_arn = deployed[ENV_BUCKET], deployed[ENV_TABLE], deployed[ENV_TOPIC]
    with model_account_aws(monkeypatch, app_model):
        session = boto3.Session(region_name=app_model.region)
        s3, ddb, sns, cloudwatch = (session.client(name) for name in ("s3", "dynamodb", "sns", "cloudwatch"))
        s3.create_bucket(Bucket=bucket)
        assert sns.create_topic(Name=topic_arn.rsplit(":", 1)[-1])["TopicArn"] == topic_arn
        create_run_table(ddb, table)
        runtime = Runtime(
            dynamodb=ddb,
            s3=s3,
            sns=sns,
            cloudwatch=cloudwatch,
            table=table,
            bucket=bucket,
            topic_arn=topic_arn,
            settings=PipelineSettings(),
            deployment="mtrl",  # as deployed: the per-deployment series is published too
        )
        record, _ = runtime.registry.create(RUN_ID, {"dataset": {}})
        rows = [SignalRow(step=step, zero_spread_share=1.0) for step in range(1, 11)]
        body = render_signals(SignalHeader(planned_steps=30, group_size=4), rows).encode()
        s3.put_object(Bucket=bucket, Key=signals_key(RUN_ID), Body=body)
        with CallRecorder() as recorder:
            document: dict[str, Any] | None = poll_health(runtime, RUN_ID, record, ended=False)
        assert document is not None
        assert document["verdict"] == "stop"  # a rule fired, so the poll also notified
        yield [call for call in recorder.calls if call.service != "dynamodb"]


def test_every_health_poll_call_is_allowed_for_the_backend_role(
    recorded_poll: list[AwsCall], app_model: AppModel
) -> None:
    assert {str(call) for call in recorded_poll} == {
        "s3.GetObject",
        "s3.PutObject",
        "cloudwatch.PutMetricData",
        "sns.Publish",
    }
    assert_calls_allowed(recorded_poll, BACKEND_ROLE, model=app_model)
    metric = next(call for call in recorded_poll if call.operation == "PutMetricData")
    assert [datum["Dimensions"] for datum in metric.params["MetricData"]] == [
        [{"Name": "RunId", "Value": RUN_ID}],
        [{"Name": "Deployment", "Value": "mtrl"}],  # the series the deployment's run-health alarm watches
    ]
    assert [datum["Value"] for datum in metric.params["MetricData"]] == [2.0, 2.0]


def test_another_namespace_is_denied(recorded_poll: list[AwsCall], app_model: AppModel) -> None:
    metric = next(call for call in recorded_poll if call.operation == "PutMetricData")
    elsewhere = AwsCall(metric.service, metric.operation, {**metric.params, "Namespace": "Other"}, metric.region)
    with pytest.raises(AssertionError, match="cloudwatch:PutMetricData"):
        assert_calls_allowed([elsewhere], BACKEND_ROLE, model=app_model)
