"""The trainer's progress comes only from the trainer's own lines (issue 38 item 6): verl's LocalLogger prints
``step:N - name:value - ...`` in the TaskRunner actor (verl 0.9 ``verl/utils/logger/aggregate_logger.py``
``concat_dict_to_str``; ``verl/trainer/main_ppo.py`` ``TaskRunnerV1``) and Ray forwards it to the driver prefixed
``(TaskRunnerV1 pid=N)``. A line any other actor prints — an environment in an agent-loop worker, a reward worker, a
second actor an environment starts and names TaskRunnerV1 — never moves the progress or the health rows."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from mtrl.backends.verl import progress as verl_progress
from mtrl.health.signals import parse_signals

BUCKET = "mtrl-data"
TRAINER = "(TaskRunnerV1 pid=41)"
REAL = [
    f"{TRAINER} TaskRunner hostname: head-0, PID: 41\n",
    f"{TRAINER} step:1 - critic/score/mean:0.25 - actor/entropy:1.5\n",
    f"{TRAINER} step:2 - critic/score/mean:0.5 - num_turns/mean:4.0\n",
]
FORGED = [
    "(AgentLoopWorker pid=77) step:999 - critic/score/mean:1.0\n",  # an environment's print in an agent-loop worker
    "(AgentLoopWorker pid=77, ip=10.0.0.7) step:999 - critic/score/mean:1.0\n",
    "(AgentLoopWorker pid=77) (TaskRunnerV1 pid=41) step:999 - critic/score/mean:1.0\n",  # the prefix, quoted
    "(WorkerDict pid=90) step:999 - critic/score/mean:1.0\n",
    "(pid=12) step:999 - critic/score/mean:1.0\n",  # a Ray task
    "(raylet) step:999 - critic/score/mean:1.0\n",
    "(TaskRunnerV1 pid=66) step:999 - critic/score/mean:1.0\n",  # an actor an environment named TaskRunnerV1
    f"{TRAINER} note: step:999 - critic/score/mean:1.0\n",  # the trainer printing someone's text mid-line
    f"{TRAINER} step:{'9' * 400} - critic/score/mean:1.0\n",  # a step with hundreds of digits
    "step:999 critic/score/mean:1.0\n",  # not the logger's format
]


@pytest.fixture
def s3(mocked_aws: None) -> Any:
    client = boto3.client("s3", region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    return client


def recorded(s3: Any, lines: list[str]) -> tuple[dict[str, Any], list[tuple[int, float | None]]]:
    progress = verl_progress.Progress(s3, f"s3://{BUCKET}/runs/r1/", planned_steps=3, group_size=4)
    progress.start()
    assert list(verl_progress.follow(lines, progress)) == lines  # every line still goes to the job log
    body = s3.get_object(Bucket=BUCKET, Key="runs/r1/signals.jsonl")["Body"].read().decode()
    rows = [(row.step, row.reward_mean) for row in parse_signals(body).rows]
    try:
        state = json.loads(s3.get_object(Bucket=BUCKET, Key="runs/r1/progress.json")["Body"].read())
    except s3.exceptions.NoSuchKey:
        state = {}
    return state, rows


@pytest.mark.parametrize("forged", FORGED)
def test_a_step_line_from_another_actor_moves_nothing(s3: Any, forged: str) -> None:
    # Forged before, between and after the trainer's real lines.
    state, rows = recorded(s3, [REAL[0], forged, REAL[1], forged, REAL[2], forged])
    assert state == {"step": 2}
    assert rows == [(1, 0.25), (2, 0.5)]


def test_the_trainers_own_lines_on_any_node_and_the_drivers_count(s3: Any) -> None:
    lines = [
        "(TaskRunnerV1 pid=41, ip=10.0.0.5) TaskRunner hostname: head-0\n",
        "(TaskRunnerV1 pid=41, ip=10.0.0.5) step:1 - critic/score/mean:0.25\n",
        "step:2 - critic/score/mean:0.5\n",  # the driver's own output (a trainer run in the driver process)
    ]
    state, rows = recorded(s3, lines)
    assert state == {"step": 2}
    assert rows == [(1, 0.25), (2, 0.5)]


def test_rays_coloured_prefix_is_read_as_the_trainers(s3: Any) -> None:
    """Ray colours the actor prefix of every forwarded line (``ray/_private/worker.py`` ``print_worker_logs``: ANSI
    codes unless ``RAY_COLOR_PREFIX=0``, even into a pipe, which is how the entrypoint reads ``main_ppo``); a forged
    coloured line from another actor still moves nothing."""
    cyan, reset = "\x1b[36m", "\x1b[0m"
    lines = [
        f"{cyan}(TaskRunner pid=41, ip=10.0.0.5){reset} TaskRunner hostname: worker-0\n",
        f"{cyan}(AgentLoopWorker pid=77){reset} step:999 - critic/score/mean:1.0\n",
        f"{cyan}(TaskRunner pid=41, ip=10.0.0.5){reset} step:1 - critic/score/mean:0.25\n",
        f"{cyan}(TaskRunner pid=41, ip=10.0.0.5){reset} step:2 - critic/score/mean:0.5\n",
    ]
    state, rows = recorded(s3, lines)
    assert state == {"step": 2}
    assert rows == [(1, 0.25), (2, 0.5)]
