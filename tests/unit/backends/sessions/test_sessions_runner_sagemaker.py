"""The sessions runner on the SageMaker training service (the fake session: control plane through botocore, runtime
over HTTP, both validated against the service models): each attempt opens its own session, named in the progress
first; the state after each step is the service's saved model package, loaded by the next session on resume; every
session is stopped and deleted, on success and on failure; the tokens billed add up across sessions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from aws_fakes import FakeAws
from run_support import BUCKET, config, world
from session_fakes import PACKAGE_GROUP, FakeSession, RuntimeServer, runtime_server, session_opener

from mtrl.backends.sessions.runner import Progress, RunConfig, RunStore, SessionsRunner
from mtrl.backends.sessions.settings import SessionsSettings

HUB_MODEL = "arn:aws:sagemaker:us-east-1:aws:hub-content/SageMakerPublicHub/Model/qwen3-4b/1.0.0"


@pytest.fixture
def sagemaker(aws: FakeAws) -> Iterator[tuple[FakeSession, RuntimeServer]]:
    fake = FakeSession(coming_up=[])
    fake.attach(aws)
    with runtime_server(fake, aws.session) as server:
        yield fake, server


def _config() -> RunConfig:
    deploy = SessionsSettings(
        region="us-east-1",
        data_bucket=BUCKET,
        sessions_role_arn="arn:aws:iam::123456789012:role/mtrl-sessions",
        sessions_model_package_group_arn=PACKAGE_GROUP,
    )
    local = config(service="sagemaker", base_model=HUB_MODEL, tokenizer="Qwen/Qwen3-4B", max_tokens=4)
    return local.model_copy(update={"deploy": deploy})


def test_a_run_resumes_in_a_new_session_from_the_state_the_last_one_saved(
    aws: FakeAws, sagemaker: tuple[FakeSession, RuntimeServer]
) -> None:
    fake, server = sagemaker
    s3 = world()
    opener = session_opener(aws.session, fake, server.url)
    first = SessionsRunner(_config(), s3, open=opener).advance(1)
    assert (first.step, first.phase) == (1, "training")
    assert first.state is not None
    assert first.state.reference is not None  # the service's saved model package
    assert first.usage["sample"] > 0
    created = fake.requested("CreateTrainingSession")
    assert [request["TrainingSessionName"] for request in created] == first.sessions == ["mtrl-run-sessions-1-1"]
    assert created[0]["ModelConfig"]["BaseModelArn"] == HUB_MODEL
    assert created[0]["Tags"] == [{"Key": "mtrl:run-id", "Value": "run-sessions-1"}]
    assert fake.status == "Deleted"

    done = SessionsRunner(_config(), s3, open=opener).advance()
    assert (done.step, done.phase) == (2, "done")
    assert done.sessions == ["mtrl-run-sessions-1-1", "mtrl-run-sessions-1-2"]
    loads = [
        params["operationConfig"]["loadState"]
        for name, params in fake.requests
        if name == "ExecuteTrainingOperation" and "loadState" in params["operationConfig"]
    ]
    assert loads == [{"modelPackageArn": first.state.reference, "loadOptimizer": True}]
    assert len(fake.requested("DeleteTrainingSession")) == 2
    assert done.usage["sample"] > first.usage["sample"]
    assert RunStore(s3, _config().output_uri).progress() == done


def test_a_failed_session_is_deleted_and_the_run_fails(
    aws: FakeAws, sagemaker: tuple[FakeSession, RuntimeServer]
) -> None:
    fake, server = sagemaker
    fake.fail = {"saveState": "the checkpoint store is unreachable"}
    s3 = world()
    progress = Progress(service="sagemaker", total_steps=2)
    for _ in range(3):  # an operation the service failed: an infrastructure failure, resumed until it is too many
        progress = SessionsRunner(_config(), s3, open=session_opener(aws.session, fake, server.url)).advance()
    assert progress.phase == "failed"
    assert "checkpoint store is unreachable" in progress.message
    assert progress.step == 0
    assert len(fake.requested("DeleteTrainingSession")) == 3
