"""``baseline_evaluation`` through the real state machine and handlers (moto): the local backend's baseline is its
step-0 evaluation (no Baseline phase, but the Evaluate phase runs without an eval split); a backend refused at
Register starts nothing. The serverless Baseline phase is in test_pipeline_serverless_backend.py."""

from __future__ import annotations

import json
from dataclasses import dataclass

from mtrl.contracts.backend import RunContext
from tests.integration.pipeline_support import (
    FakeAdapter,
    assert_cleanly_finished,
    jsonl,
    pipeline_context,
    wordle_rows,
)

DATA = jsonl(wordle_rows(20))


@dataclass
class MeasuredInTraining(FakeAdapter):
    """Like the local backend: training evaluates the untrained policy first; Evaluate reports before and after."""

    def evaluate(self, run: RunContext) -> dict[str, float]:
        self._call("evaluate", run)
        return {"heldout_evaluation_before": 0.125, "heldout_evaluation_after": 0.75, "heldout_tasks": 8.0}

    def evaluation_settings(self, run: RunContext) -> dict[str, str]:
        return {"evaluation_measure": "evaluation"}


def test_a_local_baseline_is_the_step_zero_evaluation_reported_beside_the_trained_score() -> None:
    adapter = MeasuredInTraining()
    with pipeline_context(adapter) as pipeline:
        pipeline.put("training-data/base.run.json", json.dumps({"baseline_evaluation": True}).encode())
        started = pipeline.upload_and_trigger("training-data/base.jsonl", DATA)
        execution = pipeline.wait(started["execution_arn"])
        assert execution["status"] == "SUCCEEDED", execution
        states = pipeline.entered_states(started["execution_arn"])
        assert "Baseline" not in states  # nothing to run before training: the untrained policy is step 0
        assert states.index("BaselineWanted") < states.index("Submit")
        assert "Evaluate" in states  # without an eval split: the baseline needs the after-training figure beside it
        record = assert_cleanly_finished(pipeline, started["run_id"], "SUCCEEDED")
        summary = pipeline.object_json(f"runs/{started['run_id']}/summary.json")
        assert summary["baseline"]["metrics"] == {"heldout_evaluation": {"baseline": 0.125, "after_training": 0.75}}
        assert summary["baseline"]["measure"] == "evaluation"
        assert record["settings"]["baseline_evaluation"] is True
        (note,) = pipeline.notifications()
        assert "heldout_evaluation 0.125 → 0.75" in note["message"]


def test_a_baseline_on_hyperpod_is_refused_at_register_and_nothing_runs() -> None:
    adapter = FakeAdapter()
    with pipeline_context(adapter) as pipeline:
        manifest = {"backend": "hyperpod", "baseline_evaluation": True}
        pipeline.put("training-data/hpbase.run.json", json.dumps(manifest).encode())
        started = pipeline.upload_and_trigger("training-data/hpbase.jsonl", DATA)
        execution = pipeline.wait(started["execution_arn"])
        assert execution["status"] == "FAILED"
        assert "not available on backend 'hyperpod'" in execution["cause"]
        record = assert_cleanly_finished(pipeline, started["run_id"], "FAILED")
        assert record["error"]["step"] == "Register"
        assert adapter.calls == []
