"""The run's end products: a PNG plot (reward and held-out success over steps) and a JSON summary."""

from __future__ import annotations

import math
from typing import Any

from mtrl.health.plots import learning_curve
from mtrl.local.trainer import TrainingState


def summarize(state: TrainingState, *, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Before/after held-out evaluation and success (the environment's own criteria), signal health and weights.

    ``evaluation_before``/``evaluation_after`` are the external evaluation (``mtrl.health.evaluation``; its
    ``evaluation_measure`` says whether it is the declared EVALUATION or the success fallback), reported apart
    from ``reward_before``/``reward_after``. The before figure is the untrained policy: the run's baseline.
    """
    evaluations = state.evaluations
    before = evaluations[0] if evaluations else None
    after = evaluations[-1] if state.done and len(evaluations) > 1 else None
    health = _health_over_run(state.history)
    summary: dict[str, Any] = {
        "env_id": state.config.env_id,
        "status": "completed" if state.done else state.phase,
        "config": state.config.to_dict(),
        "steps": state.step,
        "train_seconds": round(state.train_seconds, 2),
        "heldout": {
            "tasks": before["tasks"] if before else 0,
            "evaluation_measure": _measure(before),
            "evaluation_before": before.get("evaluation_mean") if before else None,
            "evaluation_after": after.get("evaluation_mean") if after else None,
            "success_before": before["success_rate"] if before else None,
            "success_after": after["success_rate"] if after else None,
            "reward_before": before["reward_mean"] if before else None,
            "reward_after": after["reward_mean"] if after else None,
            "components_before": before["components"] if before else {},
            "components_after": after["components"] if after else {},
        },
        "evaluations": evaluations,
        "last_step": state.history[-1] if state.history else None,
        "signal_health": health,
        # What the untrained policy's groups offered: the reward designer's view (later steps converge and flatten).
        "signal_health_first_step": state.history[0]["signal_health"] if state.history else {},
        "weights": dict(zip(state.policy.feature_names, (round(float(w), 4) for w in state.policy.theta), strict=True)),
    }
    summary.update(extra or {})
    return summary


def _measure(evaluation: dict[str, Any] | None) -> str | None:
    """The measure of a held-out evaluation (states saved before evaluations were recorded have none)."""
    return str(evaluation["evaluation_measure"]) if evaluation and "evaluation_measure" in evaluation else None


def _health_over_run(history: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per component: mean within-group spread and zero-spread share averaged over all training steps."""
    names = sorted({name for record in history for name in record.get("signal_health", {})}, key=_reward_first)
    result: dict[str, dict[str, float]] = {}
    for name in names:
        entries = [record["signal_health"][name] for record in history if name in record.get("signal_health", {})]
        result[name] = {
            "mean_spread": round(sum(e["mean_spread"] for e in entries) / len(entries), 4),
            "zero_spread_share": round(sum(e["zero_spread_share"] for e in entries) / len(entries), 4),
        }
    return result


def _reward_first(name: str) -> tuple[bool, str]:
    return (name != "reward", name)


def plot_png(state: TrainingState, *, title: str | None = None) -> bytes:
    """Training reward mean per step and held-out success at each evaluation, as PNG bytes."""
    before = state.evaluations[0]["success_rate"] if state.evaluations else math.nan
    after = state.evaluations[-1]["success_rate"] if len(state.evaluations) > 1 else math.nan
    return learning_curve(
        steps=[int(record["step"]) for record in state.history],
        rewards=[float(record["reward_mean"]) for record in state.history],
        train_success=[float(record["success_rate"]) for record in state.history],
        eval_steps=[int(entry["step"]) for entry in state.evaluations],
        eval_success=[float(entry["success_rate"]) for entry in state.evaluations],
        title=title or f"{state.config.env_id}: held-out success {before:.0%} → {after:.0%} (local GRPO)",
    )
