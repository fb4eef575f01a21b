"""The ``sessions`` backend through the real state machine and handlers on moto: its descriptor builds its adapter, the
loop runs in the status polls with the local training service on the tiny model, and the run ends SUCCEEDED with its
signal rows, summary, held-out evaluation before and after, cost and teardown; a run whose service fails ends FAILED
with the service closed and nothing left."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any, ClassVar

import pytest

from mtrl.backends.sessions.service import ServiceError
from mtrl.client.runs import run_cost
from mtrl.health.signals import parse_signals
from tests.integration.pipeline_support import BUCKET, REGION, Harness, jsonl, pipeline_context, wordle_rows

pytest.importorskip("torch", reason="the mtrl[llm] extra (make test installs it)")
pytestmark = pytest.mark.filterwarnings(
    "ignore:Model has `tie_word_embeddings=True`:UserWarning",
    "ignore:Setting `save_embedding_layers`:UserWarning",
)

from mtrl.backends.sessions.adapter import SessionsAdapter  # noqa: E402
from mtrl.backends.sessions.runner import Progress, RunConfig, open_service  # noqa: E402

OPTIONS = {
    "service": "local",
    "base_model": "tiny",
    "steps": 2,
    "group_size": 2,
    "tasks_per_step": 2,
    "max_tokens": 4,
}
MANIFEST = {"eval_split": 0.25, "baseline_evaluation": True, "backend_options": OPTIONS}


def _sessions_pipeline(adapter: SessionsAdapter | None = None) -> Any:
    return pipeline_context(
        adapter,
        backend_name=None if adapter is None else "sessions",
        run_backend="sessions",
        backend_settings=lambda: {"data_bucket": BUCKET},
    )


@pytest.fixture
def sessions_pipeline() -> Iterator[Harness]:
    with _sessions_pipeline() as pipeline:
        yield pipeline


def test_a_sessions_run_trains_the_tiny_model_to_success_through_the_real_pipeline(sessions_pipeline: Harness) -> None:
    pipeline = sessions_pipeline
    pipeline.put("training-data/sessions.run.json", json.dumps(MANIFEST).encode())
    started = pipeline.upload_and_trigger("training-data/sessions.jsonl", jsonl(wordle_rows(8)))
    execution = pipeline.wait(started["execution_arn"], timeout=300)
    assert execution["status"] == "SUCCEEDED", execution
    run_id = started["run_id"]
    record = pipeline.record(run_id)
    assert record["status"] == "SUCCEEDED"
    assert record["settings"]["backend"] == "sessions"
    assert record["job_id"] == f"sessions-{run_id}"
    progress = record["progress"]
    assert (progress["step"], progress["total_steps"], progress["phase"]) == (2, 2, "done")
    assert progress["service"] == "local"
    assert progress["token_usage"]["sample"] > 0
    assert progress["token_usage"]["train"] >= 0
    assert record["cost"] == {"usd": 0.0}  # a local-service run costs nothing
    assert run_cost(record, region=REGION).total == Decimal(0)
    for figure in ("heldout_reward_before", "heldout_reward_after", "heldout_success_before", "heldout_success_after"):
        assert figure in record["metrics"]
    assert "teardown" in record["phases"]
    assert record["resources"] == []  # nothing at rest, nothing made
    assert pipeline.slots() == {"holders": {}, "queue": []}
    signals = parse_signals(
        pipeline.s3.get_object(Bucket=BUCKET, Key=f"runs/{run_id}/signals.jsonl")["Body"].read().decode()
    )
    assert signals.header.planned_steps == 2
    assert signals.header.group_size == 2
    assert [row.step for row in signals.rows] == [1, 2]
    for row in signals.rows:
        assert row.reward_mean is not None
        assert row.mean_turns is not None
        assert row.extra["infra_failed"] == 0
        assert "sampler_kl" in row.extra
    summary = pipeline.object_json(f"runs/{run_id}/summary.json")
    assert summary["status"] == "SUCCEEDED"
    state = pipeline.s3.list_objects_v2(Bucket=BUCKET, Prefix=f"runs/{run_id}/sessions/state/step-2/")
    assert state.get("KeyCount", 0) > 0  # the state after the last step, for a resume


class _ClosedAfterFailure:
    """The local service with a forward-backward that the service rejects (not an infrastructure failure)."""

    closed: ClassVar[list[bool]] = []

    def __init__(self, config: RunConfig, progress: Progress) -> None:
        self._service = open_service(config, progress)

    def forward_backward(self, *_: Any) -> Any:
        raise ServiceError("the service rejected the batch", infrastructure=False)

    def close(self) -> None:
        type(self).closed.append(True)
        self._service.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._service, name)


def test_a_sessions_run_whose_service_fails_ends_failed_with_the_service_closed_and_nothing_left() -> None:
    _ClosedAfterFailure.closed = []
    adapter = SessionsAdapter(open=_ClosedAfterFailure)
    with _sessions_pipeline(adapter) as pipeline:
        manifest = {"backend_options": {**OPTIONS, "steps": 1, "max_tokens": 2}}
        pipeline.put("training-data/sessions-bad.run.json", json.dumps(manifest).encode())
        started = pipeline.upload_and_trigger("training-data/sessions-bad.jsonl", jsonl(wordle_rows(4)))
        execution = pipeline.wait(started["execution_arn"], timeout=300)
        assert execution["status"] == "FAILED", execution
        assert "the service rejected the batch" in execution["cause"]
        run_id = started["run_id"]
        record = pipeline.record(run_id)
        assert record["status"] == "FAILED"
        assert record["progress"]["phase"] == "failed"
        assert "teardown" in record["phases"]
        assert record["resources"] == []
        assert pipeline.slots() == {"holders": {}, "queue": []}
        assert pipeline.object_json(f"runs/{run_id}/summary.json")["status"] == "FAILED"
    assert _ClosedAfterFailure.closed == [True]


def test_a_budgeted_sagemaker_sessions_run_is_refused_at_preflight_never_run_unchecked(
    sessions_pipeline: Harness,
) -> None:
    # Issue 36 item 4: SageMaker training-session prices are unsourced, so its budget could never stop the run.
    hub_model = "arn:aws:sagemaker:us-east-1:aws:hub-content/SageMakerPublicHub/Model/qwen3-4b/1.0.0"
    options = {"service": "sagemaker", "base_model": hub_model, "tokenizer": "Qwen/Qwen3-4B"}
    manifest = {"max_budget_usd": 20, "backend_options": options}
    sessions_pipeline.put("training-data/sessions-budget.run.json", json.dumps(manifest).encode())
    started = sessions_pipeline.upload_and_trigger("training-data/sessions-budget.jsonl", jsonl(wordle_rows(4)))
    execution = sessions_pipeline.wait(started["execution_arn"], timeout=300)
    run_id = started["run_id"]
    assert execution["error"] == "PreflightFailed", execution
    assert f"run {run_id}: max_budget_usd 20.0 cannot be enforced" in execution["cause"]
    assert "per-token prices are unsourced" in execution["cause"]
    record = sessions_pipeline.record(run_id)
    assert record["status"] == "FAILED"
    assert "submit" not in record["phases"]
    assert record["resources"] == []
