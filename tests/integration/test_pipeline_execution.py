"""The real state machine and handlers, executed in moto: every terminal path tears down, frees the slot,
finalizes the record and sends exactly one notification."""

from __future__ import annotations

import contextlib
import json

import pytest

from mtrl.runs.registry import RunNotFound
from tests.integration.pipeline_support import (
    BUCKET,
    TABLE,
    FakeAdapter,
    Harness,
    assert_cleanly_finished,
    jsonl,
    pipeline_context,
    wordle_rows,
)

DATA = jsonl(wordle_rows(20))


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

    record = assert_cleanly_finished(pipeline, run_id, "SUCCEEDED")
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
    record = assert_cleanly_finished(pipeline, started["run_id"], "SUCCEEDED")
    assert record["settings"]["eval_split"] == 0.25
    assert record["settings"]["instance_count"] == 2
    assert record["settings"]["hyperparameters"] == {"learning_rate": 1e-5}
    assert record["evaluation"] == {"pass@1": 0.25}
    assert record["manifest"]["uri"] == f"s3://{BUCKET}/training-data/tuned.run.json"


def test_bad_manifest_fails_at_register(pipeline: Harness) -> None:
    pipeline.put("training-data/typo.run.json", b'{"instance_cont": 2, "backend": "tpu"}')
    started = pipeline.upload_and_trigger("training-data/typo.jsonl", DATA)
    execution = pipeline.wait(started["execution_arn"])
    assert execution["status"] == "FAILED"
    assert execution["error"] == "ConfigurationError"
    assert "key 'instance_cont': unknown setting" in execution["cause"]
    assert "key 'backend'" in execution["cause"]
    record = assert_cleanly_finished(pipeline, started["run_id"], "FAILED")
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
        # Wait for Register and the first slot poll (a fixed sleep was too short on a loaded machine).
        status = None

        def waiting() -> bool:
            nonlocal status
            with contextlib.suppress(RunNotFound):
                status = pipeline.record(started["run_id"])["status"]
            return status == "WAITING_FOR_SLOT"

        pipeline.wait_until(waiting, timeout=60)
        assert status == "WAITING_FOR_SLOT"
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
    pipeline.wait_until(lambda: "status" in pipeline.adapter.phases(started["run_id"]))
    pipeline.shift_clock(3600)  # past the 5 min run timeout
    execution = pipeline.wait(started["execution_arn"])
    assert execution["error"] == "RunTimedOut"
    record = assert_cleanly_finished(pipeline, started["run_id"], "TIMED_OUT")
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
        pipeline.wait_until(lambda: "status" in adapter.phases(started["run_id"]))
        # moto cannot reach TimeoutSeconds quickly; both endings look the same to the reaper but for the status.
        pipeline.sfn.stop_execution(executionArn=started["execution_arn"], cause="operator")
        assert pipeline.wait(started["execution_arn"])["status"] == "ABORTED"  # and no poll still in flight
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
        record = assert_cleanly_finished(pipeline, started["run_id"], final)
        assert record["error"]["error"] == error
        assert record["error"]["step"] == "Train"
        assert "cancel" in adapter.phases(started["run_id"])
        (note,) = pipeline.notifications()
        assert words in note["subject"]


def test_budget_exceeded_cancels_the_job() -> None:
    adapter = FakeAdapter(hang=True, cost_usd=12.5)
    with pipeline_context(adapter) as pipeline:
        pipeline.put("training-data/pricey.run.json", b'{"max_budget_usd": 10}')
        started = pipeline.upload_and_trigger("training-data/pricey.jsonl", DATA)
        execution = pipeline.wait(started["execution_arn"])
        assert execution["error"] == "BudgetExceeded"
        assert "12.50 USD exceeds max_budget_usd 10" in execution["cause"]
        record = assert_cleanly_finished(pipeline, started["run_id"], "FAILED")
        assert record["cost"] == {"usd": 12.5}
        assert "cancel" in adapter.phases(started["run_id"])
        (note,) = pipeline.notifications()
        assert "exceeded its budget" in note["message"]
