"""The local backend driven by the real state machine: an ``eval_split`` run trains on the training split only and
evaluates on the held-out rows Validate wrote (before, it trained on every row and held out its own
``holdout_fraction`` of them)."""

from __future__ import annotations

import json

import boto3

from mtrl.backends._aws import AwsClients
from mtrl.backends.local import LocalAdapter
from mtrl.validation.dataset import eval_split_of
from tests.integration.pipeline_support import (
    BUCKET,
    REGION,
    jsonl,
    pipeline_context,
    wordle_rows,
)

EVAL_SPLIT = 0.25


def _games(tasks: list[dict[str, object]]) -> list[str]:
    """The 'Game <n>' prompt of each task (the local store keeps the rows' metadata, not their ids)."""
    return sorted(str(task["prompt"][1]["content"]).split(":")[0] for task in tasks)  # type: ignore[index]


def test_an_eval_split_run_on_the_local_backend_holds_out_exactly_the_eval_split() -> None:
    rows = wordle_rows(20)
    held_out = [row for row in rows if eval_split_of(row["id"], EVAL_SPLIT)]
    trained = [row for row in rows if not eval_split_of(row["id"], EVAL_SPLIT)]
    assert held_out
    assert trained
    adapter = LocalAdapter(clients=AwsClients(boto3.Session(region_name=REGION)), chunk_seconds=30.0)
    manifest = {
        "eval_split": EVAL_SPLIT,
        "environment_args": {"verbose": False},
        "hyperparameters": {"steps": 1, "tasks_per_step": 2, "group_size": 2, "eval_every": 1, "eval_tasks": 4},
    }
    with pipeline_context(adapter) as pipeline:
        pipeline.put("training-data/local-split.run.json", json.dumps(manifest).encode())
        started = pipeline.upload_and_trigger("training-data/local-split.jsonl", jsonl(rows))
        execution = pipeline.wait(started["execution_arn"], timeout=240)
        assert execution["status"] == "SUCCEEDED", execution
        run_id = started["run_id"]
        record = pipeline.record(run_id)
        assert record["status"] == "SUCCEEDED"
        tasks = pipeline.object_json(f"runs/{run_id}/local/tasks.json")
        assert _games(tasks["holdout"]) == _games([row["metadata"] for row in held_out])
        assert _games(tasks["train"]) == _games([row["metadata"] for row in trained])
        assert record["validation"]["splits"]["eval_uri"] == f"s3://{BUCKET}/runs/{run_id}/data/eval.jsonl"


def test_an_invalid_eval_split_dataset_writes_no_split_files() -> None:
    rows = wordle_rows(20)
    rows[7]["metadata"]["answer"] = 5  # a wrong type: the dataset fails validation
    with pipeline_context() as pipeline:
        pipeline.put("training-data/bad-split.run.json", json.dumps({"eval_split": EVAL_SPLIT}).encode())
        started = pipeline.upload_and_trigger("training-data/bad-split.jsonl", jsonl(rows))
        execution = pipeline.wait(started["execution_arn"], timeout=120)
        assert execution["status"] == "FAILED", execution
        run_id = started["run_id"]
        listed = pipeline.s3.list_objects_v2(Bucket=BUCKET, Prefix=f"runs/{run_id}/data/")
        assert listed.get("KeyCount") == 0, listed
        report = pipeline.object_json(f"runs/{run_id}/validation.json")
        assert report["valid"] is False
        assert report["splits"] is None
        assert "splits" not in pipeline.record(run_id)["validation"]
