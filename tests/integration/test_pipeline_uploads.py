"""Uploads as EventBridge delivers them: duplicates, bursts and re-uploads."""

from __future__ import annotations

from tests.integration.pipeline_support import (
    FakeAdapter,
    Harness,
    jsonl,
    pipeline_context,
    wordle_rows,
)

DATA = jsonl(wordle_rows(20))


def test_duplicate_deliveries_start_one_run(pipeline: Harness) -> None:
    pipeline.put("training-data/twice.jsonl", DATA)
    (event,) = pipeline.captured_events(1)
    results = [pipeline.deliver(event) for _ in range(10)]
    assert {r["run_id"] for r in results} == {results[0]["run_id"]}
    executions = pipeline.wait_all(1)
    assert len(executions) == 1
    assert executions[0]["status"] == "SUCCEEDED"
    assert pipeline.deliver(event)["status"] == "DUPLICATE"  # also after the run finished
    assert len(pipeline.runs()) == 1
    assert len(pipeline.notifications()) == 1


def test_concurrent_uploads_run_one_at_a_time_in_order() -> None:
    with pipeline_context(FakeAdapter(), slot_poll_seconds=1) as pipeline:
        _burst(pipeline)


def _burst(pipeline: Harness) -> None:
    keys = [f"training-data/burst-{i}.jsonl" for i in range(5)]
    for key in keys:
        pipeline.put(key, DATA)
    events = pipeline.captured_events(5)
    assert len(events) == 5
    started = [pipeline.deliver(event) for event in events]
    executions = pipeline.wait_all(5)
    assert [e["status"] for e in executions] == ["SUCCEEDED"] * 5
    assert pipeline.adapter.max_active == 1
    runs = {run["run_id"]: run for run in pipeline.runs()}
    assert set(runs) == {s["run_id"] for s in started}
    assert all(run["status"] == "SUCCEEDED" for run in runs.values())
    # Arrival order: upload time, then run id (uploads within one second tie on time).
    expected = sorted(runs, key=lambda rid: (runs[rid]["dataset"]["uploaded_at"], rid))
    assert pipeline.adapter.acquired_order == expected
    assert pipeline.slots() == {"holders": {}, "queue": []}
    assert len(pipeline.notifications()) == 5


def test_reupload_of_a_fixed_file_is_a_new_run(pipeline: Harness) -> None:
    first = pipeline.upload_and_trigger("training-data/fixed.jsonl", b"not json\n")
    assert pipeline.wait(first["execution_arn"])["status"] == "FAILED"
    second = pipeline.upload_and_trigger("training-data/fixed.jsonl", DATA)
    assert second["status"] == "STARTED"
    assert second["run_id"] != first["run_id"]
    assert pipeline.wait(second["execution_arn"])["status"] == "SUCCEEDED"
    assert {run["status"] for run in pipeline.runs()} == {"FAILED", "SUCCEEDED"}
    assert len(pipeline.notifications()) == 2
