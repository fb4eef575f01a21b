"""The signal rows of the serverless and hyperpod backends (mtrl.backends.episode_rows: read and rewrite
signals.jsonl, read the episode drivers' metrics back with GetMetricData), recorded at botocore against moto, must
each be allowed for the pipeline's backend function role as synthesized (the status poll runs there). The bucket is
the function's deployed one."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from mtrl.backends.episode_rows import update_signals
from mtrl.runs.runtime import ENV_BUCKET
from tests.contract.iam_contract import AppModel, AwsCall, CallRecorder, assert_calls_allowed
from tests.contract.recorded_runs import BACKEND_FUNCTION, BACKEND_ROLE, model_account_aws

RUN_ID = "wordle-20260101T000000Z-abcdef12"


@pytest.fixture
def recorded(app_model: AppModel, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[AwsCall]]:
    bucket = app_model.function_environment(BACKEND_FUNCTION)[ENV_BUCKET]
    with model_account_aws(monkeypatch, app_model):
        session = boto3.Session(region_name=app_model.region)
        s3, cloudwatch = session.client("s3"), session.client("cloudwatch")
        s3.create_bucket(Bucket=bucket)
        now = datetime.now(UTC)
        with CallRecorder() as recorder:
            for step in (1, 2):
                row = update_signals(
                    s3=s3,
                    cloudwatch=cloudwatch,
                    run_id=RUN_ID,
                    output_uri=f"s3://{bucket}/runs/{RUN_ID}/",
                    dimensions={"Environment": "wordle", "Job": "mtrl-wordle-abc"},
                    progress={"step": step, "total_steps": 10},
                    job_started=now - timedelta(hours=1),
                    now=now + timedelta(minutes=5 * step),
                    group_size=8,
                )
                assert row is not None
                assert row.step == step
        yield recorder.calls


def test_every_episode_rows_call_is_allowed_for_the_backend_role(recorded: list[AwsCall], app_model: AppModel) -> None:
    assert {str(call) for call in recorded} == {"s3.GetObject", "s3.PutObject", "cloudwatch.GetMetricData"}
    assert_calls_allowed(recorded, BACKEND_ROLE, model=app_model)


def test_another_prefix_is_denied(recorded: list[AwsCall], app_model: AppModel) -> None:
    put = next(call for call in recorded if call.operation == "PutObject")
    elsewhere = AwsCall(put.service, put.operation, {**put.params, "Key": "training-data/x.jsonl"}, put.region)
    with pytest.raises(AssertionError, match="s3:PutObject"):
        assert_calls_allowed([elsewhere], BACKEND_ROLE, model=app_model)
