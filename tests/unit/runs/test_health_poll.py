"""mtrl.runs.health_poll against moto: no rows → no verdict; bad rows or a failing AWS call are recorded, never
fail the run; a rule notifies once per run however many polls see it."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from mtrl.contracts.backend import BackendError, RunContext
from mtrl.health.signals import SignalHeader, SignalRow, render_signals
from mtrl.runs.health_poll import health_key, kept_checkpoints, poll_health, signals_key
from mtrl.runs.report import checkpoint_lines
from mtrl.runs.runtime import Runtime
from mtrl.settings.pipeline import PipelineSettings
from tests.run_table import create_run_table

REGION, BUCKET, TABLE, RUN_ID = "us-east-1", "data", "runs", "r-1"


@pytest.fixture
def runtime(mocked_aws: None) -> Runtime:
    session = boto3.Session(region_name=REGION)
    s3, ddb, sns, sqs = (session.client(n) for n in ("s3", "dynamodb", "sns", "sqs"))
    s3.create_bucket(Bucket=BUCKET)
    create_run_table(ddb, TABLE)
    topic = sns.create_topic(Name="t")["TopicArn"]
    queue = sqs.create_queue(QueueName="q")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)
    made = Runtime(
        dynamodb=ddb,
        s3=s3,
        sns=sns,
        cloudwatch=session.client("cloudwatch"),
        table=TABLE,
        bucket=BUCKET,
        topic_arn=topic,
        settings=PipelineSettings(),
    )
    made.registry.create(RUN_ID, {"dataset": {}})
    made.queue_url = queue  # type: ignore[attr-defined]
    return made


def _put_rows(runtime: Runtime, steps: int) -> None:
    rows = [SignalRow(step=s, zero_spread_share=1.0) for s in range(1, steps + 1)]
    body = render_signals(SignalHeader(planned_steps=30), rows)
    runtime.s3.put_object(Bucket=BUCKET, Key=signals_key(RUN_ID), Body=body.encode())


def _messages(runtime: Runtime) -> list[dict[str, Any]]:
    queue = runtime.queue_url  # type: ignore[attr-defined]
    found = boto3.client("sqs", region_name=REGION).receive_message(QueueUrl=queue, MaxNumberOfMessages=10)
    return [json.loads(m["Body"]) for m in found.get("Messages", [])]


def test_no_rows_file_means_no_verdict(runtime: Runtime) -> None:
    assert poll_health(runtime, RUN_ID, runtime.registry.get(RUN_ID), ended=False) is None
    assert "health" not in runtime.registry.get(RUN_ID)


def test_a_bad_rows_file_is_recorded_not_raised(runtime: Runtime) -> None:
    runtime.s3.put_object(Bucket=BUCKET, Key=signals_key(RUN_ID), Body=b'{"step": 1}\n')
    assert poll_health(runtime, RUN_ID, runtime.registry.get(RUN_ID), ended=False) is None
    assert "first line must be the header" in runtime.registry.get(RUN_ID)["health"]["error"]


def test_a_failing_metric_call_is_recorded_not_raised(runtime: Runtime) -> None:
    class Failing:
        def put_metric_data(self, **_: Any) -> None:
            raise ClientError({"Error": {"Code": "Throttling", "Message": "slow down"}}, "PutMetricData")

    runtime.cloudwatch = Failing()
    _put_rows(runtime, 3)
    assert poll_health(runtime, RUN_ID, runtime.registry.get(RUN_ID), ended=False) is None
    assert "Throttling" in runtime.registry.get(RUN_ID)["health"]["error"]


def test_a_rule_notifies_once_across_polls_and_the_verdict_follows_the_rows(runtime: Runtime) -> None:
    _put_rows(runtime, 5)  # inside the warm-up
    assert poll_health(runtime, RUN_ID, runtime.registry.get(RUN_ID), ended=False)["verdict"] == "ok"  # type: ignore[index]
    for steps in (8, 9, 12):
        _put_rows(runtime, steps)
        poll_health(runtime, RUN_ID, runtime.registry.get(RUN_ID), ended=False)
    health = runtime.registry.get(RUN_ID)["health"]
    assert (health["verdict"], health["level"], health["notified"]) == ("stop", 2, ["flat_groups"])
    messages = _messages(runtime)
    assert [m["Subject"] for m in messages] == [f"mtrl run {RUN_ID}: training health warn"]
    stored = json.loads(runtime.s3.get_object(Bucket=BUCKET, Key=health_key(RUN_ID))["Body"].read())
    assert stored["last_step"] == 12
    assert "error" not in health


CONTEXT = RunContext(run_id=RUN_ID, settings={}, dataset_uri="s3://data/d.jsonl", eval_dataset_uri=None, output_uri="")


class _NoCheckpoints:
    name = "serverless"


class _BrokenCheckpoints:
    name = "local"

    def checkpoints(self, run: Any) -> dict[str, Any]:
        raise BackendError(f"run {RUN_ID}: keeping the local checkpoints: no local training run in this location")


def test_a_backend_without_evaluation_checkpoints_is_said_to_have_none() -> None:
    kept = kept_checkpoints(_NoCheckpoints(), CONTEXT)
    assert (kept["latest"], kept["best_evaluation"]) == (None, None)
    assert "serverless backend keeps no per-step evaluation checkpoints" in kept["note"]
    assert checkpoint_lines(kept) == [f"Checkpoints: {kept['note']}"]


def test_a_failure_keeping_checkpoints_is_recorded_with_the_run_id() -> None:
    kept = kept_checkpoints(_BrokenCheckpoints(), CONTEXT)
    assert RUN_ID in kept["error"]
    assert checkpoint_lines(kept)[0].startswith("Checkpoints: not recorded (run r-1: ")


def _poll_with(runtime: Runtime, notifications: str, steps: int) -> None:
    _put_rows(runtime, steps)
    record = {**runtime.registry.get(RUN_ID), "settings": {"backend_options": {"notifications": notifications}}}
    poll_health(runtime, RUN_ID, record, ended=False)


def test_notifications_failures_hears_only_of_the_stop_level(runtime: Runtime) -> None:
    _poll_with(runtime, "failures", 8)  # flat_groups at warn: no notice, and not marked as sent
    assert _messages(runtime) == []
    assert runtime.registry.get(RUN_ID)["health"]["notified"] == []
    _poll_with(runtime, "failures", 12)  # now at its stop level
    assert [m["Subject"] for m in _messages(runtime)] == [f"mtrl run {RUN_ID}: training health stop"]
    assert runtime.registry.get(RUN_ID)["health"]["notified"] == ["flat_groups"]


def test_notifications_none_sends_no_health_notice_but_keeps_the_verdict(runtime: Runtime) -> None:
    for steps in (8, 12):
        _poll_with(runtime, "none", steps)
    assert _messages(runtime) == []
    health = runtime.registry.get(RUN_ID)["health"]
    assert (health["verdict"], health["notified"]) == ("stop", [])


@pytest.mark.parametrize(
    "body",
    [
        b'{"planned_steps": 1' + b"0" * 400 + b"}\n" + b'{"step": 1}\n',
        b'{"planned_steps": 3}\n{"step": 1, "reward_mean": 1e308}\n{"step": 2, "reward_mean": -1e308}\n',
        b'{"planned_steps": 3}\n{"step": 1' + b"0" * 400 + b"}\n",
    ],
)
def test_a_hostile_rows_file_is_recorded_and_never_fails_the_run(runtime: Runtime, body: bytes) -> None:
    runtime.s3.put_object(Bucket=BUCKET, Key=signals_key(RUN_ID), Body=body)
    assert poll_health(runtime, RUN_ID, runtime.registry.get(RUN_ID), ended=True) is None
    assert runtime.registry.get(RUN_ID)["health"]["error"]


def test_a_rows_file_over_the_size_limit_is_not_read(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    from mtrl.runs import health_poll

    monkeypatch.setattr(health_poll, "MAX_SIGNALS_BYTES", 1024)
    _put_rows(runtime, 40)
    assert poll_health(runtime, RUN_ID, runtime.registry.get(RUN_ID), ended=False) is None
    assert "not read" in runtime.registry.get(RUN_ID)["health"]["error"]


def test_the_stored_verdict_is_standard_json(runtime: Runtime) -> None:
    _put_rows(runtime, 5)
    assert poll_health(runtime, RUN_ID, runtime.registry.get(RUN_ID), ended=False) is not None
    body = runtime.s3.get_object(Bucket=BUCKET, Key=f"runs/{RUN_ID}/health.json")["Body"].read()

    def refuse(constant: str) -> Any:
        raise ValueError(constant)

    json.loads(body, parse_constant=refuse)
