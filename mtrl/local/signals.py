"""The local trainer's per-step history as signal rows (``mtrl.health.rows``): one row per GRPO step.

The trainer records, per step, the reward mean, the within-group spread of the reward (``signal_health``), the
episode-side fields (``episode_signals``: malformed share, turns, turn-limit hits, errors) and the gradient norm;
the held-out evaluation is measured every ``eval_every`` steps and at the end. A log-linear policy has no KL
penalty, entropy target or truncated responses, so those fields stay unknown (null).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mtrl.health.rows import signal_row
from mtrl.health.signals import SignalHeader, SignalRow
from mtrl.local.trainer import TrainingState

STEP_TIME_KEY = "time"  # stamped on each history record when the step finished (mtrl.backends.local)
_EPISODE_FIELDS = ("malformed_share", "mean_turns", "cap_hit_share", "error_share", "timeout_share")


def header_of(state: TrainingState) -> SignalHeader:
    return SignalHeader(planned_steps=state.config.steps, group_size=state.config.group_size)


def row_of(record: Mapping[str, Any], evaluation_mean: Any) -> SignalRow:
    """A history record's row; ``evaluation_mean`` is the held-out one of this step (None when not measured), never
    the training episodes' own."""
    reward = (record.get("signal_health") or {}).get("reward") or {}
    episodes = record.get("episode_signals") or {}
    time = record.get(STEP_TIME_KEY)
    figures = {
        **{name: episodes.get(name) for name in _EPISODE_FIELDS},
        "reward_mean": record.get("reward_mean"),
        "reward_spread_mean": reward.get("mean_spread"),
        "zero_spread_share": reward.get("zero_spread_share"),
        "evaluation_mean": evaluation_mean,
        "grad_norm": record.get("grad_norm"),
    }
    return signal_row(int(record["step"]), figures, time=time if isinstance(time, str) else None)


def signal_rows(state: TrainingState) -> list[SignalRow]:
    evaluations = {int(entry["step"]): entry.get("evaluation_mean") for entry in state.evaluations if entry["step"]}
    return [row_of(record, evaluations.get(int(record["step"]))) for record in state.history]
