"""The real state machine and handlers, executed in moto: every terminal path tears down, frees the slot,
finalizes the record and sends exactly one notification."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from mtrl.backends.base import JobState
from tests.integration.pipeline_support import (
    BUCKET,
    TABLE,
    FakeAdapter,
    Harness,
    jsonl,
    pipeline_context,
    running_pipeline,
    wordle_rows,
)

DATA = jsonl(wordle_rows(20))


@pytest.fixture
def adapter() -> FakeAdapter:
    return FakeAdapter()


@pytest.fixture
def pipeline(adapter: FakeAdapter) -> Iterator[Harness]:
    yield from running_pipeline(adapter)


def _assert_cleanly_finished(pipeline: Harness, run_id: str, status: str) -> dict[str, Any]:
    record = pipeline.record(run_id)
    assert record["status"] == status
    assert record["finished_at"]
    assert pipeline.adapter.live == set(), "resources left behind"
    assert all("removed_at" in resource for resource in record["resources"])
    assert pipeline.slots() == {"holders": {}, "queue": []}
    assert "teardown" in record["phases"] or not record.get("settings")
    summary = pipeline.object_json(f"runs/{run_id}/summary.json")
    assert summary["status"] == status
    return record


def test_happy_path_trains_reports_and_tears_down(pipeline: Harness) -> None:
    started = pipeline.upload_and_trigger("training-data/wordle-small.jsonl", DATA)
    assert started["status"] == "STARTED"
    run_id = started["run_id"]
    assert run_id.startswith("wordle-small-")
    execution = pipeline.wait(started["execution_arn"])
    assert execution["status"] == "SUCCEEDED"
    states = pipeline.entered_states(started["execution_arn"])
    assert states[:5] == ["Register", "IsDuplicate", "AcquireSlot", "SlotAcquired", "Validate"]
    assert states[-4:] == ["Teardown", "Report", "RunFailed", "Succeeded"]
    assert "Evaluate" not in states  # no evaluation split by default

    record = _assert_cleanly_finished(pipeline, run_id, "SUCCEEDED")
    for phase in ("register", "slot", "validate", "preflight", "provision", "submit", "train", "teardown"):
        assert record["phases"][phase]["started_at"] <= record["phases"][phase]["ended_at"], phase
    assert record["job_id"] == f"job-{run_id}"
    assert record["metrics"] == {"reward_mean": 0.5}
    assert record["progress"] == {"step": 2}
    assert record["settings"]["backend"] == "local"
    assert record["dataset"]["version_id"]
    assert [r["identifier"] for r in record["resources"]] == [f"{run_id}-workers"]
    assert pipeline.adapter.phases(run_id) == ["preflight", "provision", "submit", "status", "status", "cleanup"]

    validation = pipeline.object_json(f"runs/{run_id}/validation.json")
    assert validation["valid"] is True
    assert validation["train"]["rows"] == 20
    (note,) = pipeline.notifications()
    assert note["subject"] == f"mtrl run succeeded: {run_id}"
    assert "reward_mean=0.5" in note["message"]
    assert "every resource the run created was removed" in note["message"]


def test_manifest_settings_and_evaluation(pipeline: Harness) -> None:
    manifest = {"eval_split": 0.25, "hyperparameters": {"learning_rate": 1e-5}, "instance_count": 2}
    pipeline.put("training-data/tuned.run.json", json.dumps(manifest).encode())
    pipeline.captured_events(0, timeout=0.2)  # manifests never match the upload rule
    started = pipeline.upload_and_trigger("training-data/tuned.jsonl", DATA)
    execution = pipeline.wait(started["execution_arn"])
    assert execution["status"] == "SUCCEEDED"
    assert "Evaluate" in pipeline.entered_states(started["execution_arn"])
    record = _assert_cleanly_finished(pipeline, started["run_id"], "SUCCEEDED")
    assert record["settings"]["eval_split"] == 0.25
    assert record["settings"]["instance_count"] == 2
    assert record["settings"]["hyperparameters"] == {"learning_rate": 1e-5}
    assert record["evaluation"] == {"pass@1": 0.25}
    assert record["manifest"]["uri"] == f"s3://{BUCKET}/training-data/tuned.run.json"


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
        record = _assert_cleanly_finished(pipeline, started["run_id"], "FAILED")
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
    record = _assert_cleanly_finished(pipeline, started["run_id"], "FAILED")
    assert record["error"]["step"] == "Evaluate"
    assert len(pipeline.notifications()) == 1


def test_bad_manifest_fails_at_register(pipeline: Harness) -> None:
    pipeline.put("training-data/typo.run.json", b'{"instance_cont": 2, "backend": "tpu"}')
    started = pipeline.upload_and_trigger("training-data/typo.jsonl", DATA)
    execution = pipeline.wait(started["execution_arn"])
    assert execution["status"] == "FAILED"
    assert execution["error"] == "ConfigurationError"
    assert "key 'instance_cont': unknown setting" in execution["cause"]
    assert "key 'backend'" in execution["cause"]
    record = _assert_cleanly_finished(pipeline, started["run_id"], "FAILED")
    assert record["error"]["step"] == "Register"
    assert pipeline.adapter.calls == []  # nothing provisioned, not even preflight
    (note,) = pipeline.notifications()
    assert "the run settings (manifest or deployment configuration) are invalid" in note["message"]


def test_slot_wait_is_bounded(adapter: FakeAdapter) -> None:
    with pipeline_context(adapter, slot_poll_seconds=1) as pipeline:
        # Another live run holds the only slot: this run waits, then gives up after slot_max_wait_minutes.
        pipeline.ddb.put_item(
            TableName=TABLE,
            Item={"pk": {"S": "SLOT"}, "sk": {"S": "0"}, "holder": {"S": "other"}, "lease_until": {"N": "9999999999"}},
        )
        started = pipeline.upload_and_trigger("training-data/patient.jsonl", DATA)
        time.sleep(1.5)
        assert pipeline.record(started["run_id"])["status"] == "WAITING_FOR_SLOT"
        assert pipeline.slots()["queue"] == [started["run_id"]]
        pipeline.shift_clock(2 * 24 * 3600)
        execution = pipeline.wait(started["execution_arn"])
        assert execution["error"] == "SlotWaitTimedOut"
        record = pipeline.record(started["run_id"])
        assert record["status"] == "FAILED"
        assert record["error"]["step"] == "AcquireSlot"
        assert adapter.calls == []
        assert pipeline.slots() == {"holders": {0: "other"}, "queue": []}  # its place in line was given back
        assert len(pipeline.notifications()) == 1


def test_run_timeout_cancels_the_job(pipeline: Harness) -> None:
    pipeline.adapter.hang = True
    started = pipeline.upload_and_trigger("training-data/slow.jsonl", DATA)
    deadline = time.time() + 20
    while "status" not in pipeline.adapter.phases(started["run_id"]) and time.time() < deadline:
        time.sleep(0.05)
    pipeline.shift_clock(13 * 3600)  # past the default 12 h run timeout
    execution = pipeline.wait(started["execution_arn"])
    assert execution["error"] == "RunTimedOut"
    record = _assert_cleanly_finished(pipeline, started["run_id"], "TIMED_OUT")
    assert record["error"]["step"] == "Train"
    assert "cancel" in pipeline.adapter.phases(started["run_id"])
    (note,) = pipeline.notifications()
    assert "timed out at Train" in note["subject"]


@pytest.mark.parametrize(
    ("status", "final", "error", "words"),
    [("ABORTED", "ABORTED", "Aborted", "aborted"), ("TIMED_OUT", "TIMED_OUT", "ExecutionTimedOut", "timed out")],
)
def test_interrupted_execution_is_reaped(adapter: FakeAdapter, status: str, final: str, error: str, words: str) -> None:
    """An execution that ends without its own Catch (stopped by hand, or the machine-wide timeout)."""
    adapter.hang = True
    with pipeline_context(adapter, status_poll_seconds=1) as pipeline:
        started = pipeline.upload_and_trigger("training-data/stopped.jsonl", DATA)
        deadline = time.time() + 20
        while "status" not in adapter.phases(started["run_id"]) and time.time() < deadline:
            time.sleep(0.05)
        # moto cannot reach TimeoutSeconds quickly; both endings look the same to the reaper but for the status.
        pipeline.sfn.stop_execution(executionArn=started["execution_arn"], cause="operator")
        assert pipeline.wait(started["execution_arn"])["status"] == "ABORTED"
        time.sleep(1.5)  # let an in-flight poll finish
        assert pipeline.record(started["run_id"])["status"] == "TRAINING"  # nothing reported it yet
        event = {
            "source": "aws.states",
            "detail-type": "Step Functions Execution Status Change",
            "detail": {
                "executionArn": started["execution_arn"],
                "stateMachineArn": pipeline.state_machine_arn,
                "name": started["run_id"],
                "status": status,
            },
        }
        assert pipeline.invoke("reaper", event)["reaped"] is True
        assert pipeline.invoke("reaper", event)["reaped"] is False  # a redelivered event changes nothing
        record = _assert_cleanly_finished(pipeline, started["run_id"], final)
        assert record["error"]["error"] == error
        assert record["error"]["step"] == "Train"
        assert "cancel" in adapter.phases(started["run_id"])
        (note,) = pipeline.notifications()
        assert words in note["subject"]


def test_teardown_failing_once_is_retried(adapter: FakeAdapter, pipeline: Harness) -> None:
    adapter.cleanup_failures = 1
    started = pipeline.upload_and_trigger("training-data/sticky.jsonl", DATA)
    assert pipeline.wait(started["execution_arn"])["status"] == "SUCCEEDED"
    assert adapter.phases(started["run_id"]).count("cleanup") == 2
    _assert_cleanly_finished(pipeline, started["run_id"], "SUCCEEDED")
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


def test_budget_exceeded_cancels_the_job() -> None:
    adapter = FakeAdapter(hang=True, cost_usd=12.5)
    with pipeline_context(adapter) as pipeline:
        pipeline.put("training-data/pricey.run.json", b'{"max_budget_usd": 10}')
        started = pipeline.upload_and_trigger("training-data/pricey.jsonl", DATA)
        execution = pipeline.wait(started["execution_arn"])
        assert execution["error"] == "BudgetExceeded"
        assert "12.50 USD exceeds max_budget_usd 10" in execution["cause"]
        record = _assert_cleanly_finished(pipeline, started["run_id"], "FAILED")
        assert record["cost"] == {"usd": 12.5}
        assert "cancel" in adapter.phases(started["run_id"])
        (note,) = pipeline.notifications()
        assert "exceeded its budget" in note["message"]
