"""The sessions runner on moto S3 with the local service on the tiny model: steps in slices, state saved after each
step, a resume after a kill between steps, held-out evaluation before and after, and the service closed on every
path (done, failed, infrastructure failure, cancel, kill)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from run_support import BUCKET, RUN_ID, TRAIN_KEY, Opener, Stop, config, world

from mtrl.backends.sessions.service import ServiceError
from mtrl.health.signals import parse_signals

pytest.importorskip("torch", reason="the mtrl[llm] extra (make test installs it)")
pytestmark = [
    pytest.mark.usefixtures("mocked_aws"),
    pytest.mark.filterwarnings(
        "ignore:Model has `tie_word_embeddings=True`:UserWarning", "ignore:Setting `save_embedding_layers`:UserWarning"
    ),
]

from mtrl.backends.sessions.runner import MAX_SERVICE_FAILURES, RunStore, SessionsRunner  # noqa: E402


def _signals(s3: Any) -> Any:
    body = s3.get_object(Bucket=BUCKET, Key=f"runs/{RUN_ID}/signals.jsonl")["Body"].read().decode()
    return parse_signals(body)


def _keys(s3: Any, prefix: str) -> list[str]:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"runs/{RUN_ID}/{prefix}")
    return [item["Key"] for item in listed.get("Contents", [])]


def test_a_run_advances_a_step_at_a_time_and_evaluates_before_and_after() -> None:
    s3 = world(eval_rows=2)
    opener = Opener()
    runner = SessionsRunner(config(with_eval=True), s3, open=opener)
    first = runner.advance(1)
    assert (first.step, first.phase) == (1, "training")
    assert first.before is not None
    assert first.before["tasks"] == 2
    assert first.after is None
    assert first.state is not None
    assert _keys(s3, "sessions/state/step-1/")  # the local service's state files, for a resume
    second = SessionsRunner(config(with_eval=True), s3, open=opener).advance(1)
    assert (second.step, second.phase) == (2, "done")
    assert second.after is not None
    assert second.before == first.before  # evaluated once, before the first step
    assert second.usage["sample"] > first.usage["sample"] > 0
    assert all(service.closed for service in opener.services)
    assert opener.services[1].loaded  # the second slice resumed from the state saved after step 1
    signals = _signals(s3)
    assert (signals.header.planned_steps, signals.header.group_size) == (2, 2)
    assert [row.step for row in signals.rows] == [1, 2]
    assert set(signals.rows[0].extra) == {"sampler_kl", "infra_failed", "loss", "trained_episodes"}
    assert RunStore(s3, config().output_uri).progress() == second
    assert SessionsRunner(config(with_eval=True), s3, open=opener).advance() == second  # done: nothing more


def test_a_run_killed_between_steps_resumes_from_the_saved_step_without_losing_it() -> None:
    s3 = world()
    # Killed during step 2's first sampling call (SIGTERM in the task): the step is lost, the service closed.
    killed = Opener(fail=Stop("SIGTERM"), method="sample", at=10**6)
    SessionsRunner(config(), s3, open=killed).advance(1)
    killed.at = killed.calls["sample"] + 1
    with pytest.raises(Stop):
        SessionsRunner(config(), s3, open=killed).advance()
    assert [service.closed for service in killed.services] == [True, True]
    saved = RunStore(s3, config().output_uri).progress()
    assert saved is not None
    assert (saved.step, saved.phase) == (1, "training")
    assert saved.state is not None

    restarted = Opener()
    done = SessionsRunner(config(), s3, open=restarted).advance()
    assert (done.step, done.phase) == (2, "done")
    (service,) = restarted.services
    assert len(service.loaded) == 1  # the state saved after step 1
    assert [row.step for row in _signals(s3).rows] == [1, 2]
    assert done.usage["sample"] > saved.usage["sample"]


def test_an_infrastructure_failure_is_resumed_and_too_many_in_a_row_fail_the_run() -> None:
    s3 = world()
    flaky = Opener(fail=ServiceError("throttled past its retries"), at=1)
    progress = SessionsRunner(config(), s3, open=flaky).advance()
    assert progress.phase == "training"
    assert progress.service_failures == 1
    assert "throttled" in progress.message
    progress = SessionsRunner(config(), s3, open=Opener()).advance(1)
    assert (progress.step, progress.service_failures) == (1, 0)  # a written step resets the count

    for _ in range(MAX_SERVICE_FAILURES):
        progress = SessionsRunner(config(), s3, open=Opener(fail=ServiceError("session expired"))).advance()
    assert progress.phase == "failed"
    assert f"{MAX_SERVICE_FAILURES} infrastructure failures in a row" in progress.message
    assert progress.step == 1


def test_a_failure_that_is_not_the_infrastructure_s_fails_the_run_and_closes_the_service() -> None:
    s3 = world()
    opener = Opener(fail=ServiceError("invalid request", infrastructure=False))
    progress = SessionsRunner(config(), s3, open=opener).advance()
    assert progress.phase == "failed"
    assert progress.message == "ServiceError: invalid request"
    assert opener.services[0].closed


def test_a_cancel_stops_the_run_before_its_next_step() -> None:
    s3 = world()
    runner = SessionsRunner(config(), s3, open=Opener())
    runner.advance(1)
    runner.store.request_cancel()
    opener = Opener()
    progress = SessionsRunner(config(), s3, open=opener).advance()
    assert (progress.phase, progress.step) == ("stopped", 1)
    assert opener.services == []  # nothing opened for a cancelled run


def test_a_sagemaker_session_is_named_in_the_progress_before_it_is_opened() -> None:
    s3 = world()
    seen: list[list[str]] = []

    def refuse(run_config: Any, progress: Any) -> Any:
        seen.append(
            json.loads(s3.get_object(Bucket=BUCKET, Key=f"runs/{RUN_ID}/sessions/progress.json")["Body"].read())[
                "sessions"
            ]
        )
        raise ServiceError("training session is Failed, not Running")

    sagemaker = config(
        service="sagemaker",
        base_model="arn:aws:sagemaker:us-west-2:aws:hub-content/SageMakerPublicHub/Model/qwen3-4b/1.0.0",
        tokenizer="Qwen/Qwen3-4B",
    )
    progress = SessionsRunner(sagemaker, s3, open=refuse).advance()
    assert seen == [["mtrl-run-sessions-1-1"]]
    assert progress.sessions == ["mtrl-run-sessions-1-1"]
    assert progress.service_failures == 1
    assert SessionsRunner(sagemaker, s3, open=refuse).advance().sessions[-1] == "mtrl-run-sessions-1-2"


def test_the_run_reads_the_validated_version_of_its_dataset() -> None:
    s3 = world()
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    validated = s3.put_object(
        Bucket=BUCKET, Key=TRAIN_KEY, Body=s3.get_object(Bucket=BUCKET, Key=TRAIN_KEY)["Body"].read()
    )
    s3.put_object(Bucket=BUCKET, Key=TRAIN_KEY, Body=b"not json\n")  # replaced after Validate accepted it
    run = config(steps=1).model_copy(update={"dataset_version_id": validated["VersionId"]})
    progress = SessionsRunner(run, s3, open=Opener()).advance()
    assert (progress.phase, progress.step) == ("done", 1)
