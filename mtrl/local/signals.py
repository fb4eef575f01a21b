"""The local trainer's per-step history as signal rows (``mtrl.health.signals``): one row per GRPO step.

The trainer records, per step, the reward mean, the within-group spread of the reward (``signal_health``), the
episode-side fields (``episode_signals``: malformed share, turns, turn-limit hits, errors) and the gradient norm;
the held-out evaluation is measured every ``eval_every`` steps and at the end. A log-linear policy has no KL
penalty, entropy target or truncated responses, so those fields stay unknown (null).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mtrl.health.signals import SignalHeader, SignalRow
from mtrl.local.trainer import TrainingState

STEP_TIME_KEY = "time"  # stamped on each history record when the step finished (mtrl.backends.local)
_EPISODE_FIELDS = ("malformed_share", "mean_turns", "cap_hit_share", "error_share", "timeout_share")


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def header_of(state: TrainingState) -> SignalHeader:
    return SignalHeader(planned_steps=state.config.steps, group_size=state.config.group_size)


def row_of(record: Mapping[str, Any], evaluation_mean: float | None) -> SignalRow:
    reward = (record.get("signal_health") or {}).get("reward") or {}
    episodes = record.get("episode_signals") or {}
    time = record.get(STEP_TIME_KEY)
    episode_values = {name: _finite(episodes.get(name)) for name in _EPISODE_FIELDS}
    return SignalRow(
        step=int(record["step"]),
        time=time if isinstance(time, str) else None,
        reward_mean=_finite(record.get("reward_mean")),
        reward_spread_mean=_finite(reward.get("mean_spread")),
        zero_spread_share=_finite(reward.get("zero_spread_share")),
        evaluation_mean=evaluation_mean,
        grad_norm=_finite(record.get("grad_norm")),
        malformed_share=episode_values["malformed_share"],
        mean_turns=episode_values["mean_turns"],
        cap_hit_share=episode_values["cap_hit_share"],
        error_share=episode_values["error_share"],
        timeout_share=episode_values["timeout_share"],
    )


def signal_rows(state: TrainingState) -> list[SignalRow]:
    evaluations = {
        int(entry["step"]): _finite(entry.get("evaluation_mean")) for entry in state.evaluations if entry["step"]
    }
    return [row_of(record, evaluations.get(int(record["step"]))) for record in state.history]
