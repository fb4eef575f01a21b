"""Training health in the real state machine (moto + the real handlers): the status poll evaluates the rules
on the backend's signal rows as they arrive, writes health.json, publishes mtrl/RunHealth, notifies once per rule,
and the summary, the final notification and `mtrl status` carry the verdict."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from rich.console import Console

from environments.wordle.game import WordleEnv
from mtrl.backends._aws import AwsClients, S3Uri
from mtrl.backends.local import LocalAdapter
from mtrl.cli.runs_cmd import status_renderable
from mtrl.client.runs import run_view
from mtrl.contracts.backend import RunContext
from mtrl.contracts.environment import EpisodeResult
from mtrl.health.signals import SignalHeader, render_signals
from tests.integration.pipeline_support import (
    BUCKET,
    REGION,
    FakeAdapter,
    assert_cleanly_finished,
    jsonl,
    pipeline_context,
    wordle_rows,
)

STEPS = 10


def _constant_result(self: WordleEnv) -> EpisodeResult:
    return EpisodeResult(reward=0.0, success=False, evaluation=0.0)  # every rollout of every task scores the same


def test_a_local_run_with_a_constant_reward_fires_flat_groups_live(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(WordleEnv, "result", _constant_result)
    # One GRPO step per poll: the rules see the rows while the run trains.
    adapter = LocalAdapter(clients=AwsClients(boto3.Session(region_name=REGION)), chunk_seconds=0.001)
    manifest = {
        "environment_args": {"verbose": False},
        "hyperparameters": {"steps": STEPS, "tasks_per_step": 2, "group_size": 2, "eval_every": 5, "eval_tasks": 2},
    }
    with pipeline_context(adapter) as pipeline:
        pipeline.put("training-data/flat.run.json", json.dumps(manifest).encode())
        started = pipeline.upload_and_trigger("training-data/flat.jsonl", jsonl(wordle_rows(12)))
        execution = pipeline.wait(started["execution_arn"], timeout=240)
        assert execution["status"] == "SUCCEEDED", execution  # notify only: no early_stop asked for
        run_id = started["run_id"]
        record = pipeline.record(run_id)
        assert record["status"] == "SUCCEEDED"
        health = record["health"]
        # warm-up 5 steps; warn after 3 flat steps (step 8), stop level after 5 (step 10).
        assert [(f["rule"], f["level"], f["step"]) for f in health["fired"]] == [
            ("flat_groups", "warn", 8),
            ("flat_groups", "stop", 10),
        ]
        assert health["verdict"] == "stop"
        assert health["notified"] == ["flat_groups"]
        document = pipeline.object_json(f"runs/{run_id}/health.json")
        assert document["rules"]["flat_groups"]["level"] == "stop"
        assert document["last_step"] == STEPS
        notifications = pipeline.notifications()
        alerts = [n for n in notifications if "training health" in n["subject"]]
        assert len(alerts) == 1, notifications  # once per run and rule, not every poll
        assert "fired at step 8" in alerts[0]["message"]  # evaluated live, two steps before the end
        assert "flat_groups (warn)" in alerts[0]["message"]
        final = [n for n in notifications if n["subject"].startswith("mtrl run succeeded")]
        assert len(final) == 1
        assert "Training health: stop (flat_groups warn at step 8, flat_groups stop at step 10)" in final[0]["message"]
        summary = pipeline.object_json(f"runs/{run_id}/summary.json")
        assert summary["health"]["verdict"] == "stop"
        metric = boto3.client("cloudwatch", region_name=REGION).list_metrics(Namespace="mtrl/RunHealth")["Metrics"]
        assert metric == [
            {
                "Namespace": "mtrl/RunHealth",
                "MetricName": "RunHealth",
                "Dimensions": [{"Name": "RunId", "Value": run_id}],
            }
        ]
        console = Console(width=250, record=True)
        console.print(status_renderable(run_view(record)))
        shown = [line.split() for line in console.export_text().splitlines() if line.startswith("health ")]
        assert shown == [
            ["health", "stop:", *["flat_groups", "warn", "at", "step", "8,", "flat_groups", "stop", "at", "step", "10"]]
        ]


class _ZeroStepAdapter(FakeAdapter):
    """A backend whose job "succeeds" having trained nothing (verl #5725): it writes only the header."""

    def submit(self, run: RunContext) -> str:
        uri = S3Uri.parse(run.output_uri).join("signals.jsonl")
        body = render_signals(SignalHeader(planned_steps=100, group_size=8), []).encode()
        boto3.client("s3", region_name=REGION).put_object(Bucket=uri.bucket, Key=uri.key, Body=body)
        return super().submit(run)


def test_a_zero_step_success_fails_the_run_as_incomplete() -> None:
    with pipeline_context(_ZeroStepAdapter()) as pipeline:
        started = pipeline.upload_and_trigger("training-data/zero.jsonl", jsonl(wordle_rows(4)))
        execution = pipeline.wait(started["execution_arn"], timeout=120)
        assert execution["status"] == "FAILED", execution
        run_id = started["run_id"]
        record: dict[str, Any] = assert_cleanly_finished(pipeline, run_id, "FAILED")
        assert record["error"]["step"] == "Train"
        assert "after step 0 of 100 planned (health rule 'incomplete')" in record["error"]["cause"]
        assert record["health"]["verdict"] == "incomplete"
        assert pipeline.object_json(f"runs/{run_id}/health.json")["verdict"] == "incomplete"
        assert BUCKET in record["health"]["uri"]


@pytest.mark.parametrize("early_stop", [True, {"rules": ["flat_groups"]}])
def test_early_stop_cancels_a_flat_run_and_it_ends_stopped(
    monkeypatch: pytest.MonkeyPatch, early_stop: bool | dict[str, list[str]]
) -> None:
    monkeypatch.setattr(WordleEnv, "result", _constant_result)
    adapter = LocalAdapter(clients=AwsClients(boto3.Session(region_name=REGION)), chunk_seconds=0.001)
    manifest = {
        "early_stop": early_stop,
        "environment_args": {"verbose": False},
        "hyperparameters": {"steps": 30, "tasks_per_step": 2, "group_size": 2, "eval_every": 4, "eval_tasks": 2},
    }
    with pipeline_context(adapter) as pipeline:
        pipeline.put("training-data/stop.run.json", json.dumps(manifest).encode())
        started = pipeline.upload_and_trigger("training-data/stop.jsonl", jsonl(wordle_rows(12)))
        execution = pipeline.wait(started["execution_arn"], timeout=240)
        assert execution["status"] == "FAILED", execution  # the run did not succeed: it was stopped
        run_id = started["run_id"]
        record = pipeline.record(run_id)
        assert record["status"] == "STOPPED"
        assert record["stop_rule"] == "flat_groups"
        assert record["stop_reason"].startswith(
            "early_stop: training-health rule 'flat_groups' reached its stop level at step 10"
        )
        assert record["error"]["error"] == "EarlyStopped"
        assert record["phases"]["train"]["outcome"] == "stopped"
        assert record["progress"]["step"] == 10  # cancelled at the stop level, 20 steps before the planned end
        summary = pipeline.object_json(f"runs/{run_id}/summary.json")
        assert summary["stop_reason"] == record["stop_reason"]
        final = [n for n in pipeline.notifications() if n["subject"].startswith("mtrl run stopped")]
        assert len(final) == 1
        assert "flat_groups" in final[0]["message"]
        # The backend kept its latest state: the local training state is still there, at step 10.
        state = pipeline.object_json(f"runs/{run_id}/local/state.json")
        assert state["step"] == 10
        # ... and the best held-out evaluation's checkpoint (evaluated at steps 4 and 8; a tie keeps the first).
        kept = summary["checkpoints"]
        assert kept["latest"] == {"step": 10, "uri": f"s3://{BUCKET}/runs/{run_id}/local/state.json"}
        assert (kept["best_evaluation"]["step"], kept["best_evaluation"]["evaluation_mean"]) == (4, 0.0)
        best = pipeline.object_json(f"runs/{run_id}/local/best_policy.json")
        assert best == state["best"]["policy"]
        assert (
            f"Checkpoint kept (best held-out evaluation): step 4, evaluation 0: {kept['best_evaluation']['uri']}"
            in (final[0]["message"])
        )
