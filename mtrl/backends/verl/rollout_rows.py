"""The environment side of a verl run's training-health rows, from the rollouts verl dumps after each step.

With ``trainer.rollout_data_dir`` set, verl writes ``<dir>/<step>.jsonl`` after every training step (one line per
sample: its prompt text as ``input``, ``score`` and the fields ``MtrlAgentLoop`` returned in ``reward_extra_info``;
``RayPPOTrainer._log_rollout_data``). This module only reads that source: each line as a scored episode, grouped by
its task (``TASK_INDEX``, the dataset row GRPO sampled ``rollout.n`` times) — never by the prompt text, which every
task of an environment may share. The row itself is the one builder's (``mtrl.health.rows.episode_row``): reward
mean and within-group spread, malformed actions, turns, turn-limit hits, errors, timeouts and truncation.

verl writes the file from a background thread, so it may land after the step's console line; the trainer's
``Progress`` fills a row in as soon as its file is there.

verl writes it inside its TaskRunner actor, on whichever Ray node Ray placed that actor (the head or a GPU worker:
no pod sees another's disk), so the entrypoint runs ``read_step`` on that node (``mtrl.backends.verl.rollouts``) and
gets back only the row. A dump is read in bounded pieces: at most ``MAX_DUMP_BYTES`` (a larger one is not read; the
row says so) and lines of at most ``MAX_LINE_BYTES`` (a longer one is skipped, like a line that is not JSON).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from mtrl.backends.verl.bridge import TASK_INDEX
from mtrl.contracts.environment import MALFORMED_ACTIONS, EpisodeResult
from mtrl.health.episodes import EpisodeStatus
from mtrl.health.rows import episode_row
from mtrl.health.signals import SignalRow
from mtrl.validation.lines import iter_line_blocks
from mtrl.validation.rows import RowSource, iter_rows

ROLLOUT_DIR = "rollouts"
# A step's dump holds every sample of the step (prompt and response text, and the agent loop's fields): 16 prompts x 8
# samples x 3,072 tokens is a few MB. Far larger dumps are not read (each read runs beside the training).
MAX_DUMP_BYTES = 256 * 1024 * 1024
MAX_LINE_BYTES = 16 * 1024 * 1024  # one sample


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


def read_step(directory: Path, step: int) -> SignalRow | str | None:
    """The environment side of ``step``'s row once verl has written its dump, None while it has not, or why it cannot
    be read (a dump over ``MAX_DUMP_BYTES``, an unreadable file). Runs on the node that holds the dump."""
    path = directory / f"{step}.jsonl"
    try:
        if not path.is_file():
            return None
        size = path.stat().st_size
        if size > MAX_DUMP_BYTES:
            return f"step {step}'s rollout dump is {size} bytes, over the {MAX_DUMP_BYTES}-byte bound: not read"
        with path.open("rb") as handle:
            return step_row(step, _bounded_lines(handle, MAX_DUMP_BYTES))
    except OSError as error:
        return f"step {step}'s rollout dump could not be read: {error}"


class _Capped:
    """At most ``limit`` bytes of a file (verl may still be writing it)."""

    def __init__(self, handle: BinaryIO, limit: int) -> None:
        self.handle, self.left = handle, limit

    def read(self, size: int = -1, /) -> bytes:
        want = self.left if size < 0 else min(size, self.left)
        data = self.handle.read(want) if want > 0 else b""
        self.left -= len(data)
        return data


def _bounded_lines(handle: BinaryIO, limit: int) -> Iterator[bytes]:
    """The lines of the first ``limit`` bytes; a line over ``MAX_LINE_BYTES`` is skipped, never held whole."""
    for block in iter_line_blocks(_Capped(handle, limit), max_line_bytes=MAX_LINE_BYTES):
        yield from block.lines or ()
