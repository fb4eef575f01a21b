"""The sessions runner on the SageMaker training service (the fake session: control plane through botocore, runtime
over HTTP, both validated against the service models): each attempt opens its own session, named in the progress
first; the state after each step is the service's saved model package, loaded by the next session on resume; every
session is stopped and deleted, on success and on failure; the tokens billed add up across sessions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from aws_fakes import FakeAws
from run_support import BUCKET, config, world
from session_fakes import PACKAGE_GROUP, FakeSession, RuntimeServer, runtime_server

from mtrl.backends.sessions.runner import Progress, RunConfig, RunStore, SessionsRunner, session_config
from mtrl.backends.sessions.sagemaker_service import Pacing, SageMakerTrainingService, session_clients
from mtrl.backends.sessions.settings import SessionsSettings

FAST = Pacing(
    session_poll_s=0.001,
    session_ready_timeout_s=5,
    operation_poll_s=0.001,
    operation_timeout_s=5,
    teardown_timeout_s=5,
    retry_attempts=2,
    backoff_base_s=0.001,
    backoff_max_s=0.002,
)
HUB_MODEL = "arn:aws:sagemaker:us-east-1:aws:hub-content/SageMakerPublicHub/Model/qwen3-4b/1.0.0"


class FakeTokenizer:
    eos_token_ids = (2,)

    def render(self, messages: Any, *, add_generation_prompt: bool) -> list[int]:
        return [1, *(len(message["content"]) % 50 for message in messages)]

    def decode(self, tokens: Any) -> str:
        return " ".join(map(str, tokens))


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


def _opener(aws: FakeAws, fake: FakeSession, server: RuntimeServer) -> Any:
    def open_session(run_config: RunConfig, progress: Progress) -> SageMakerTrainingService:
        # The fake holds one session at a time: the last one was deleted; the new one numbers its operations anew.
        fake.status, fake.sequence_numbers = "Absent", []
        control, runtime = session_clients(aws.session, "us-east-1", runtime_endpoint_url=server.url)
        return SageMakerTrainingService.open(
            session_config(run_config, progress.sessions[-1]),
            control=control,
            runtime=runtime,
            tokenizer_factory=FakeTokenizer,
            pacing=FAST,
        )

    return open_session


def test_a_run_resumes_in_a_new_session_from_the_state_the_last_one_saved(
    aws: FakeAws, sagemaker: tuple[FakeSession, RuntimeServer]
) -> None:
    fake, server = sagemaker
    s3 = world()
    opener = _opener(aws, fake, server)
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
        progress = SessionsRunner(_config(), s3, open=_opener(aws, fake, server)).advance()
    assert progress.phase == "failed"
    assert "checkpoint store is unreachable" in progress.message
    assert progress.step == 0
    assert len(fake.requested("DeleteTrainingSession")) == 3
