"""Golden signal curves: synthetic runs, seeded, each showing one failure mode (or none)."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from mtrl.health.signals import SignalHeader, SignalRow, Signals

START = datetime(2026, 1, 1, tzinfo=UTC)
STEP_SECONDS = 60.0


def healthy_values(step: int, planned: int, noise: random.Random) -> dict[str, Any]:
    """A run that learns: reward rises steadily, groups keep their spread, the evaluation follows the reward."""
    progress = step / planned
    return {
        "reward_mean": 0.2 + 0.6 * progress + noise.gauss(0, 0.01),
        "reward_spread_mean": 0.40 - 0.10 * progress + noise.gauss(0, 0.005),
        "zero_spread_share": min(1.0, max(0.0, 0.10 + 0.15 * progress + noise.gauss(0, 0.02))),
        "evaluation_mean": 0.3 + 0.5 * progress + noise.gauss(0, 0.01) if step % 5 == 0 else None,
        "malformed_share": max(0.0, 0.08 - 0.05 * progress + noise.gauss(0, 0.005)),
        "mean_turns": 4.0 + noise.gauss(0, 0.1),
        "cap_hit_share": 0.05,
        "error_share": 0.0,
        "timeout_share": 0.0,
        "truncation_share": 0.02,
        "entropy": 1.2 - 0.4 * progress + noise.gauss(0, 0.01),
        "kl": 0.01 * (1 + progress) * (1 + noise.uniform(-0.3, 0.3)),
        "grad_norm": 1.0 + noise.uniform(-0.3, 0.3),
    }


def curve(
    planned: int,
    steps: int | None = None,
    *,
    change: Callable[[int, dict[str, Any]], dict[str, Any]] | None = None,
    seed: int = 7,
) -> Signals:
    noise = random.Random(seed)
    rows = []
    for step in range(1, (planned if steps is None else steps) + 1):
        values = healthy_values(step, planned, noise)
        if change is not None:
            values = change(step, values)
        time = (START + timedelta(seconds=STEP_SECONDS * step)).isoformat().replace("+00:00", "Z")
        rows.append(SignalRow(step=step, time=time, **values))
    return Signals(header=SignalHeader(planned_steps=planned, group_size=8), rows=tuple(rows))


def after(steps: int) -> datetime:
    return START + timedelta(seconds=STEP_SECONDS * steps)
