"""Small seeded wordle configurations that train in a few seconds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mtrl.envs.registry import load_spec

SAMPLE = load_spec("wordle").path / "sample"


def sample_rows(name: str, limit: int | None = None) -> list[dict[str, Any]]:
    rows = [json.loads(line)["metadata"] for line in (SAMPLE / name).read_text().splitlines() if line.strip()]
    return rows[:limit]


@pytest.fixture
def wordle_rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return sample_rows("train.jsonl"), sample_rows("eval.jsonl", 30)


# Small but real: 5 GRPO steps × 4 tasks × 6 rollouts, 30 held-out words.
SMALL: dict[str, Any] = {
    "steps": 5,
    "tasks_per_step": 4,
    "group_size": 6,
    "eval_every": 5,
    "eval_tasks": 30,
    "learning_rate": 0.3,
}
FAST_ENV_ARGS = {"verbose": False}  # the game without its knowledge summary text: same rules and reward


def sample_path(name: str) -> Path:
    return SAMPLE / name
