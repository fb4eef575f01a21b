"""The hyperpod backend's signal rows: the reward workers' own episode lines (``WorkerRuntime`` → ``EpisodeMetrics``,
dimension ``RunId``), turned into CloudWatch data points (``aws_fakes.ingest_emf``: the EMF extraction moto cannot
run) and read back by the adapter's status poll (moto CloudWatch and S3), one row per estimated step."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from aws_fakes import ingest_emf

from mtrl.backends.hyperpod.signals import ESTIMATE_NOTE
from mtrl.contracts.backend import BackendError
from mtrl.envs.registry import load_spec
from mtrl.health.rules import evaluate
from mtrl.health.signals import parse_signals
from mtrl.worker.runtime import RolloutRequest, WorkerConfig, WorkerRuntime
from tests.unit.backends.hyperpod.hyperpod_world import BUCKET, World

# The adapter's test world (moto with a fake HyperPod cluster, ECS tasks and the runner's results): this folder's
# conftest.


class Script:
    """A policy that plays the same guesses in every episode."""

    def __init__(self, actions: list[str]) -> None:
        self.actions = actions

    def act(self, messages: list[dict[str, str]], *, timeout_s: float) -> str:
        played = sum(1 for message in messages if message["role"] == "assistant")
        return self.actions[min(played, len(self.actions) - 1)]


class Queue:
    def __init__(self, requests: list[RolloutRequest], runtime: list[WorkerRuntime]) -> None:
        self.requests, self.runtime = requests, runtime

    def receive(self, max_count: int, wait_s: float) -> list[RolloutRequest]:
        taken, self.requests = self.requests[:max_count], self.requests[max_count:]
        if not taken and not self.requests:
            self.runtime[0].request_shutdown()
        return taken

    def ack(self, request: RolloutRequest) -> None: ...

    def release(self, request: RolloutRequest) -> None: ...


class Sink:
    def publish(self, outcome: Any) -> None: ...


def worker_lines(run_id: str, groups: int, actions: list[str]) -> str:
    """What the run's reward workers print for ``groups`` groups of 2 rollouts of one Wordle task each."""
    requests = [
        RolloutRequest(f"r{g}-{i}", f"g{g}", {"prompt": "Guess", "answer": "beach"})
        for g in range(groups)
        for i in range(2)
    ]
    holder: list[WorkerRuntime] = []
    stream = io.StringIO()
    config = WorkerConfig(concurrency=1, group_size=2, health_every_groups=groups, health_dimensions={"RunId": run_id})
    runtime = WorkerRuntime(
        load_spec("wordle"), Queue(requests, holder), Sink(), Script(actions), config, health_stream=stream
    )
    holder.append(runtime)
    runtime.run()
    return stream.getvalue()


def submitted_job(world: World, **settings: Any) -> str:
    world.provision_until_ready()
    with pytest.raises(BackendError, match="submission in progress"):
        world.adapter.submit(world.run(**settings))
    world.runner_finishes("submit", {"job_name": "mtrl-abc"})
    return world.adapter.submit(world.run(**settings))


def test_rows_come_from_the_workers_lines_with_the_step_estimated_from_episodes(world: World) -> None:
    settings = {"hyperparameters": {"max_steps": 10, "global_batch_size": 4}}
    job = submitted_job(world, **settings)
    cloudwatch = world.aws.session.client("cloudwatch")
    submitted = world.clock.now
    # 4 groups of 2 = 8 episodes, every one with an unparsable first guess: 2 steps of global_batch_size 4.
    text = worker_lines(world.run_id, 4, ["12345", "beach"])
    assert ingest_emf(cloudwatch, text, at=datetime.fromtimestamp(submitted + 300, UTC)) > 0
    ingest_emf(cloudwatch, worker_lines("another-run", 4, ["beach"]), at=datetime.fromtimestamp(submitted + 300, UTC))
    world.clock.now = submitted + 900
    world.adapter.status(world.run(**settings), job)  # starts the runner's status task
    world.runner_finishes("status", {"job_name": job, "state": "Running", "message": "Running"})  # no step: Nova's
    status = world.adapter.status(world.run(**settings), job)
    assert "signals_error" not in status.progress, status.progress
    assert (status.progress["step"], status.progress["total_steps"]) == (2, 10)
    assert status.progress["step_source"] == ESTIMATE_NOTE
    body = world.aws.session.client("s3").get_object(Bucket=BUCKET, Key=f"runs/{world.run_id}/signals.jsonl")["Body"]
    signals = parse_signals(body.read().decode())
    assert signals.header.planned_steps == 0  # an estimate never fails the run as 'incomplete'
    (row,) = signals.rows
    assert row.step == 2
    assert row.malformed_share == 1.0  # this run's episodes only
    assert row.mean_turns == 2.0
    assert row.zero_spread_share == 1.0  # every group played the same game: the workers see whole groups
    assert row.reward_spread_mean == pytest.approx(0.0)
    assert row.extra["episodes"] == 8
    # The job ends successfully at the estimated step 2 of max_steps 10: no 'incomplete' verdict from an estimate.
    verdict = evaluate(signals, now=datetime.fromtimestamp(world.clock.now, UTC), ended=True)
    assert verdict["verdict"] != "incomplete"


def test_without_the_recipe_overrides_there_is_no_estimate_and_no_row(world: World) -> None:
    job = submitted_job(world)  # hyperparameters: max_steps only
    world.clock.now += 900
    world.adapter.status(world.run(), job)
    world.runner_finishes("status", {"job_name": job, "state": "Running", "message": "Running"})
    status = world.adapter.status(world.run(), job)
    assert "step" not in status.progress
    assert "signals_error" not in status.progress
    listed = world.aws.session.client("s3").list_objects_v2(Bucket=BUCKET, Prefix=f"runs/{world.run_id}/signals")
    assert listed.get("KeyCount", 0) == 0


def test_a_runner_result_that_is_not_json_is_reported_with_the_run_id(world: World) -> None:
    job = submitted_job(world)
    world.adapter.status(world.run(), job)
    world.runner_finishes("status", {"job_name": job, "state": "Running", "message": "Running"})
    s3 = world.aws.session.client("s3")
    s3.put_object(Bucket=BUCKET, Key=f"runs/{world.run_id}/backend/submit.json", Body=json.dumps([1]).encode()[:2])
    status = world.adapter.status(world.run(), job)
    assert world.run_id in status.progress["signals_error"]
