"""The local backend adapter through the lifecycle the state machine drives, against moto S3."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import boto3
import pytest

from mtrl.backends._aws import AwsClients
from mtrl.backends.local import LocalAdapter
from mtrl.contracts.backend import BackendError, JobState, RunContext
from mtrl.runs.report import baseline_comparison
from tests.unit.local.conftest import FAST_ENV_ARGS, SMALL, sample_path

REGION = "us-east-1"
BUCKET = "mtrl-data-test"


@pytest.fixture
def s3(mocked_aws: None) -> Any:
    client = boto3.client("s3", region_name=REGION)
    client.create_bucket(Bucket=BUCKET)
    client.put_object(Bucket=BUCKET, Key="training-data/words.jsonl", Body=sample_path("train.jsonl").read_bytes())
    eval_lines = sample_path("eval.jsonl").read_text().splitlines()[:12]
    client.put_object(Bucket=BUCKET, Key="eval/words.jsonl", Body="\n".join(eval_lines).encode())
    return client


def _run(settings: dict[str, Any] | None = None, *, run_id: str = "words-v1-abc") -> RunContext:
    base: dict[str, Any] = {
        "backend": "local",
        "environment": "wordle",
        "environment_args": FAST_ENV_ARGS,
        "hyperparameters": {**SMALL, "steps": 3, "eval_every": 3, "eval_tasks": 12},
        "region": REGION,
    }
    return RunContext(
        run_id=run_id,
        settings={**base, **(settings or {})},
        dataset_uri=f"s3://{BUCKET}/training-data/words.jsonl",
        eval_dataset_uri=f"s3://{BUCKET}/eval/words.jsonl",
        output_uri=f"s3://{BUCKET}/runs/{run_id}/",
    )


def _adapter() -> LocalAdapter:
    return LocalAdapter(clients=AwsClients(boto3.Session(region_name=REGION)), chunk_seconds=0.01)


def test_lifecycle_trains_across_polls_and_writes_results(s3: Any) -> None:
    adapter, run = _adapter(), _run()
    assert adapter.name == "local"
    findings = adapter.preflight(run)
    assert findings
    assert all(f.ok for f in findings), findings
    assert adapter.provision(run) == []
    job_id = adapter.submit(run)
    assert job_id == "local-words-v1-abc"
    assert adapter.submit(run) == job_id  # a retried submit finds the existing state
    statuses = []
    for _ in range(20):
        status = adapter.status(run, job_id)
        statuses.append(status)
        if status.state.terminal:
            break
    # A tiny time slice means one unit of work per poll: before-evaluation, 3 steps, after-evaluation.
    assert [s.state for s in statuses] == [JobState.RUNNING] * 4 + [JobState.SUCCEEDED]
    assert [s.progress["step"] for s in statuses] == [0, 1, 2, 3, 3]
    final = statuses[-1]
    assert final.progress["total_steps"] == 3
    assert set(final.metrics) >= {"reward_mean", "heldout_success_before", "heldout_success_after"}
    assert final.outputs["summary_uri"] == f"s3://{BUCKET}/runs/words-v1-abc/local/summary.json"
    assert json.loads(final.outputs["signal_health"])["reward"]["zero_spread_share"] < 1
    summary = json.loads(s3.get_object(Bucket=BUCKET, Key="runs/words-v1-abc/local/summary.json")["Body"].read())
    assert summary["run_id"] == "words-v1-abc"
    assert summary["heldout"]["tasks"] == 12
    png = s3.get_object(Bucket=BUCKET, Key="runs/words-v1-abc/local/training.png")["Body"].read()
    assert png.startswith(b"\x89PNG")
    assert adapter.status(run, job_id).state is JobState.SUCCEEDED  # polling a finished run is stable
    evaluation = adapter.evaluate(run)
    assert evaluation["heldout_tasks"] == 12
    assert evaluation["heldout_success_after"] == final.metrics["heldout_success_after"]
    assert evaluation["heldout_success_before"] == summary["heldout"]["success_before"]
    # The external evaluation is reported on its own, before (the baseline) and after, next to the reward.
    assert summary["heldout"]["evaluation_measure"] == "evaluation"  # wordle declares EVALUATION
    assert evaluation["heldout_evaluation_before"] == summary["heldout"]["evaluation_before"]
    assert evaluation["heldout_evaluation_after"] == final.metrics["heldout_evaluation_after"]
    assert 0.0 <= evaluation["heldout_evaluation_after"] <= 1.0
    assert evaluation["heldout_reward_after"] != evaluation["heldout_evaluation_after"]  # a different figure
    assert adapter.evaluation_settings(run) == {"evaluation_measure": "evaluation"}
    # baseline_evaluation on the local backend: the untrained policy's figures are the baseline in the summary.
    record = {
        "settings": {"backend": "local", "baseline_evaluation": True},
        "evaluation": evaluation,
        "evaluation_settings": adapter.evaluation_settings(run),
    }
    comparison = baseline_comparison(record)
    assert comparison is not None
    assert comparison["measure"] == "evaluation"
    assert comparison["metrics"]["heldout_evaluation"] == {
        "baseline": summary["heldout"]["evaluation_before"],
        "after_training": summary["heldout"]["evaluation_after"],
    }
    assert adapter.cleanup(run) == []
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert not any(k.startswith("training-data/") and k != "training-data/words.jsonl" for k in keys)


def test_cancel_stops_the_run(s3: Any) -> None:
    adapter, run = _adapter(), _run(run_id="words-v2-def")
    job_id = adapter.submit(run)
    assert adapter.status(run, job_id).state is JobState.RUNNING
    adapter.cancel(run, job_id)
    with pytest.raises(BackendError, match="no completed held-out evaluation"):
        adapter.evaluate(run)
    stopped = adapter.status(run, job_id)
    assert stopped.state is JobState.STOPPED
    assert stopped.progress["step"] <= 1


def test_preflight_names_bad_settings_before_anything_runs(s3: Any) -> None:
    adapter = _adapter()
    [finding] = adapter.preflight(_run({"hyperparameters": {"lora_rank": 8}}))
    assert not finding.ok
    assert "lora_rank" in finding.message
    missing = adapter.preflight(_run({"environment": "no_such_env"}))
    assert not missing[-1].ok
    assert "no_such_env" in missing[-1].message
    with pytest.raises(BackendError, match="lora_rank"):
        adapter.submit(_run({"hyperparameters": {"lora_rank": 8}}))


def test_submit_reports_unreadable_and_invalid_data(s3: Any) -> None:
    adapter = _adapter()
    s3.put_object(Bucket=BUCKET, Key="training-data/bad.jsonl", Body=b'{"id": "a", "metadata": {"answer": "zzzzz"}}\n')
    run = _run(run_id="bad-v1")
    bad = replace(run, dataset_uri=f"s3://{BUCKET}/training-data/bad.jsonl")
    with pytest.raises(BackendError, match="zzzzz"):
        adapter.submit(bad)
    gone = replace(run, dataset_uri=f"s3://{BUCKET}/training-data/missing.jsonl")
    with pytest.raises(BackendError, match="reading s3://"):
        adapter.submit(gone)
    assert adapter.status(bad, "local-bad-v1").state is JobState.FAILED


def test_a_language_model_run_needs_torch_here_or_an_interpreter_that_has_it(
    s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real Lambda runtime (and the emulator's) has no torch: preflight says so before anything runs, unless
    # MTRL_LLM_PYTHON names an interpreter with the mtrl[llm] extra (what `mtrl demo --env` sets).
    monkeypatch.setattr("mtrl.backends.local._has_torch", lambda: False)
    monkeypatch.delenv("MTRL_LLM_PYTHON", raising=False)
    run = _run({"hyperparameters": {"policy": "hf:tiny-random", "steps": 1}})
    refused = _adapter().preflight(run)
    assert [finding.ok for finding in refused] == [True, True, False]
    assert "needs torch" in refused[-1].message
    assert "MTRL_LLM_PYTHON" in refused[-1].message
    monkeypatch.setenv("MTRL_LLM_PYTHON", "/opt/llm/bin/python")
    assert all(finding.ok for finding in _adapter().preflight(run))
    # The features policy exists only for the built-ins; another environment gets the language model by default.
    features = _adapter().preflight(_run({"hyperparameters": {"policy": "features"}, "environment": "template"}))
    assert not features[-1].ok
    assert "use a language-model policy" in features[-1].message
