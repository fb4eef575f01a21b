"""The environment side of a verl run's training-health rows, from the rollouts verl dumps after each step.

With ``trainer.rollout_data_dir`` set, verl writes ``<dir>/<step>.jsonl`` after every training step (one line per
sample: its prompt text as ``input``, ``score`` and the fields ``MtrlAgentLoop`` returned in ``reward_extra_info``;
``RayPPOTrainer._log_rollout_data``). This module only reads that source: each line as a scored episode, grouped by
its task (``TASK_INDEX``, the dataset row GRPO sampled ``rollout.n`` times) — never by the prompt text, which every
task of an environment may share. The row itself is the one builder's (``mtrl.health.rows.episode_row``): reward
mean and within-group spread, malformed actions, turns, turn-limit hits, errors, timeouts and truncation.

verl writes the file from a background thread, so it may land after the step's console line; the trainer's
``Progress`` fills a row in as soon as its file is there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtrl.backends.verl.bridge import TASK_INDEX
from mtrl.contracts.environment import MALFORMED_ACTIONS, EpisodeResult
from mtrl.health.episodes import EpisodeStatus
from mtrl.health.rows import episode_row
from mtrl.health.signals import SignalRow
from mtrl.validation.rows import RowSource, iter_rows

ROLLOUT_DIR = "rollouts"


@dataclass(frozen=True)
class DumpedEpisode:
    """One sample of a step's dump, as the health aggregation reads an episode (``ScoredEpisode``)."""

    result: EpisodeResult | None
    status: EpisodeStatus
    turns: int
    hit_turn_limit: bool
    truncated: bool


def _number(entry: dict[str, Any], key: str) -> float:
    value = entry.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def dumped_episode(entry: dict[str, Any]) -> DumpedEpisode:
    """A dump line as an episode: an errored or timed-out episode has no result (its score is not the env's)."""
    status: EpisodeStatus = (
        "error" if _number(entry, "error") else "timeout" if _number(entry, "timeout") else "completed"
    )
    evaluation = entry.get("evaluation")
    result = None
    if status == "completed":
        result = EpisodeResult(
            reward=_number(entry, "score"),
            success=bool(_number(entry, "success")),
            evaluation=float(evaluation) if isinstance(evaluation, int | float) and math.isfinite(evaluation) else None,
            metrics={MALFORMED_ACTIONS: _number(entry, MALFORMED_ACTIONS)},
        )
    return DumpedEpisode(
        result=result,
        status=status,
        turns=int(_number(entry, "turns")),
        hit_turn_limit=bool(_number(entry, "hit_turn_limit")),
        truncated=bool(_number(entry, "truncated")),
    )


def _task(entry: dict[str, Any], line: int) -> tuple[str, float | int]:
    """The sample's group: its task index; a sample without one is a group of its own (it adds no spread)."""
    index = entry.get(TASK_INDEX)
    if isinstance(index, int | float) and not isinstance(index, bool) and math.isfinite(index):
        return ("task", float(index))
    return ("line", line)


def step_row(step: int, dump: RowSource) -> SignalRow:
    """The environment side of ``step``'s row from its dump (lines that are not JSON objects are skipped)."""
    groups: dict[tuple[str, float | int], list[DumpedEpisode]] = {}
    for number, entry in iter_rows(dump, skip_invalid=True):
        groups.setdefault(_task(entry, number), []).append(dumped_episode(entry))
    return episode_row(step, list(groups.values()))


def read_step(directory: Path, step: int) -> SignalRow | None:
    """The environment side of ``step``'s row once verl has written its dump, else None."""
    path = directory / f"{step}.jsonl"
    if not path.is_file():
        return None
    return step_row(step, path.read_text(encoding="utf-8", errors="replace"))
