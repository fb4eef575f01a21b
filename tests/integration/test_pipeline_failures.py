"""Failure paths of the real state machine: each backend phase failing, evaluation failing, teardown
failing once or for good — every one torn down, slot freed, record final, exactly one notification."""

from __future__ import annotations

from typing import Any

import pytest

from mtrl.contracts.backend import JobState
from tests.integration.pipeline_support import (
    FakeAdapter,
    Harness,
    assert_cleanly_finished,
    jsonl,
    pipeline_context,
    wordle_rows,
)

DATA = jsonl(wordle_rows(20))


FAILURES = [
    pytest.param(
        "Preflight", {"fail_preflight": True}, "PreflightFailed", "no ml.p5.48xlarge capacity", id="preflight"
    ),
    pytest.param("Provision", {"fail_at": {"provision"}}, "BackendFailed", "provision exploded", id="provision"),
    pytest.param("Submit", {"fail_at": {"submit"}}, "BackendFailed", "submit exploded", id="submit"),
    pytest.param(
        "Train", {"job_states": [JobState.RUNNING, JobState.FAILED]}, "JobFailed", "job crashed (OOM)", id="job-fails"
    ),
    pytest.param("Train", {"fail_at": {"status"}}, "BackendFailed", "status exploded", id="status-errors"),
]


@pytest.mark.parametrize(("step", "behaviour", "error", "cause"), FAILURES)
def test_each_backend_phase_failing_is_torn_down_and_reported(
    step: str, behaviour: dict[str, Any], error: str, cause: str
) -> None:
    with pipeline_context(FakeAdapter(**behaviour)) as pipeline:
        started = pipeline.upload_and_trigger("training-data/doomed.jsonl", DATA)
        execution = pipeline.wait(started["execution_arn"])
        assert execution["status"] == "FAILED"
        assert execution["error"] == error
        assert cause in execution["cause"]
        states = pipeline.entered_states(started["execution_arn"])
        assert f"{step}Failed" in states
        assert states[-4:] == ["Teardown", "Report", "RunFailed", "Failed"]
        record = assert_cleanly_finished(pipeline, started["run_id"], "FAILED")
        assert record["error"]["step"] == step
        assert record["error"]["error"] == error
        assert started["run_id"] in record["error"]["cause"]  # the run id is in every error
        (note,) = pipeline.notifications()
        assert f"at {step}" in note["subject"]
        assert f"in step '{step}'" in note["message"]
        assert cause in note["message"]
        # Retries only for transient errors: a permanent failure ran its phase once.
        phase = {"Train": "status"}.get(step, step.lower())
        assert pipeline.adapter.phases(started["run_id"]).count(phase) == (2 if error == "JobFailed" else 1)


def test_evaluation_failing(pipeline: Harness) -> None:
    pipeline.adapter.fail_at = {"evaluate"}
    pipeline.put("training-data/evald.run.json", b'{"eval_split": 0.25}')
    started = pipeline.upload_and_trigger("training-data/evald.jsonl", DATA)
    assert pipeline.wait(started["execution_arn"])["status"] == "FAILED"
    record = assert_cleanly_finished(pipeline, started["run_id"], "FAILED")
    assert record["error"]["step"] == "Evaluate"
    assert len(pipeline.notifications()) == 1


def test_teardown_failing_once_is_retried(adapter: FakeAdapter, pipeline: Harness) -> None:
    adapter.cleanup_failures = 1
    started = pipeline.upload_and_trigger("training-data/sticky.jsonl", DATA)
    assert pipeline.wait(started["execution_arn"])["status"] == "SUCCEEDED"
    assert adapter.phases(started["run_id"]).count("cleanup") == 2
    assert_cleanly_finished(pipeline, started["run_id"], "SUCCEEDED")
    assert len(pipeline.notifications()) == 1


def test_teardown_failing_for_good_is_reported(adapter: FakeAdapter, pipeline: Harness) -> None:
    adapter.cleanup_failures = 100
    started = pipeline.upload_and_trigger("training-data/stuck.jsonl", DATA)
    execution = pipeline.wait(started["execution_arn"])
    assert execution["status"] == "FAILED"
    assert execution["error"] == "TeardownIncomplete"
    record = pipeline.record(started["run_id"])
    assert record["status"] == "FAILED"
    assert record["error"]["step"] == "Teardown"
    assert adapter.phases(started["run_id"]).count("cleanup") == 7  # first attempt + MaxAttempts (6) retries
    assert pipeline.slots() == {"holders": {}, "queue": []}  # report frees the slot regardless
    (note,) = pipeline.notifications()
    assert f"fake-workers {started['run_id']}-workers" in note["message"]
    assert "Remove them by hand" in note["message"]
