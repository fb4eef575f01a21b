"""A new backend is a package plus one registration (docs/pipeline.md, "For backend authors"): the toy backend in
``toy/`` is registered with ``register_backend`` and a run of it goes through the real state machine and handlers on
moto — its adapter built from its descriptor, its per-run options and ceiling checked at Register, its cost priced by
its own hook, through the pipeline and through ``mtrl.client``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal

import pytest

from mtrl.client.runs import run_cost
from mtrl.contracts.registry import backend_names, register_backend, unregister_backend
from tests.integration.pipeline_support import BUCKET, REGION, Harness, jsonl, pipeline_context, wordle_rows
from tests.unit.backends.toy.descriptor import DESCRIPTOR

DATA = jsonl(wordle_rows(12))


@pytest.fixture
def toy_pipeline() -> Iterator[Harness]:
    register_backend(DESCRIPTOR)
    try:
        # No adapter handed to the harness: the pipeline's handlers build the toy's own from its descriptor.
        with pipeline_context(backend_name=None, run_backend="toy") as pipeline:
            yield pipeline
    finally:
        unregister_backend("toy")
    assert "toy" not in backend_names()


def _toy_objects(pipeline: Harness, run_id: str) -> list[str]:
    listed = pipeline.s3.list_objects_v2(Bucket=BUCKET, Prefix=f"runs/{run_id}/toy/")
    return [item["Key"] for item in listed.get("Contents", [])]


def test_a_registered_toy_backend_trains_to_completion_through_the_real_pipeline(toy_pipeline: Harness) -> None:
    pipeline = toy_pipeline
    pipeline.put("training-data/toy3.run.json", json.dumps({"backend_options": {"steps": 3}}).encode())
    started = pipeline.upload_and_trigger("training-data/toy3.jsonl", DATA)
    execution = pipeline.wait(started["execution_arn"])
    assert execution["status"] == "SUCCEEDED", execution
    run_id = started["run_id"]
    record = pipeline.record(run_id)
    assert record["status"] == "SUCCEEDED"
    assert record["settings"]["backend"] == "toy"
    assert record["settings"]["backend_options"] == {"steps": 3}
    assert record["job_id"] == f"toy-{run_id}"
    assert record["progress"] == {"step": 3, "total_steps": 3}  # the option reached the adapter: three polls
    assert record["metrics"] == {"reward_mean": 1.0}
    assert record["cost"] == {"usd": 0.75}  # the adapter's cost_usd, priced by the toy's cost hook
    (world,) = record["resources"]
    assert world["kind"] == "toy-world"
    assert "removed_at" in world
    assert _toy_objects(pipeline, run_id) == []  # cleanup removed the toy's world and job
    assert pipeline.slots() == {"holders": {}, "queue": []}
    # The client prices the stored record through the toy's descriptor too (cost_usage, then cost).
    assert run_cost(record, region=REGION).total == Decimal("0.75")


def test_a_budgeted_toy_run_passes_preflight_through_its_budget_usage(toy_pipeline: Harness) -> None:
    # The descriptor's budget_usage lets Preflight price the run before it starts (without it: refused).
    manifest = {"max_budget_usd": 1.0, "backend_options": {"steps": 3}}
    toy_pipeline.put("training-data/toyb.run.json", json.dumps(manifest).encode())
    started = toy_pipeline.upload_and_trigger("training-data/toyb.jsonl", DATA)
    execution = toy_pipeline.wait(started["execution_arn"])
    assert execution["status"] == "SUCCEEDED", execution
    findings = toy_pipeline.record(started["run_id"])["phases"]["preflight"]["findings"]
    assert [f["ok"] for f in findings if f["check"] == "budget"] == [True]


@pytest.mark.parametrize(
    ("manifest", "cause"),
    [
        ({"backend_options": {"steps": 9}}, "key 'backend_options.steps': Input should be less than or equal to 5"),
        ({"backend_options": {"colour": "red"}}, "'backend_options.colour': not a per-run option of backend 'toy'"),
        ({"baseline_evaluation": True}, "not available on backend 'toy': the toy backend plays no evaluation"),
    ],
)
def test_the_toy_descriptor_s_rules_refuse_a_run_at_register(
    toy_pipeline: Harness, manifest: dict[str, object], cause: str
) -> None:
    pipeline = toy_pipeline
    pipeline.put("training-data/toybad.run.json", json.dumps(manifest).encode())
    started = pipeline.upload_and_trigger("training-data/toybad.jsonl", DATA)
    execution = pipeline.wait(started["execution_arn"])
    assert execution["status"] == "FAILED"
    assert cause in execution["cause"]
    record = pipeline.record(started["run_id"])
    assert record["error"]["step"] == "Register"
    assert "job_id" not in record
    assert _toy_objects(pipeline, started["run_id"]) == []
