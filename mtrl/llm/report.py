"""What a chat policy's rollouts say about a reward: per-group and overall figures, a PNG, and the learning curve.

Signal health comes from ``mtrl.health.signal_health`` (the same threshold and verdict as everywhere else). Held-out
figures
are the external evaluation (``mtrl.health.evaluation``) and the environment's own ``success`` on the evaluation tasks,
reported apart from the training reward.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

from mtrl.health import signal_health
from mtrl.health.evaluation import figures as evaluation_figures
from mtrl.health.plots import learning_curve, pyplot
from mtrl.llm.rollout import Episode
from mtrl.validation.rows import task_key

TRANSCRIPT_GROUPS = 3  # groups whose best and worst transcripts are kept


def task_label(task: dict[str, Any], index: int, ids: Mapping[str, str] | None = None) -> str:
    """The dataset row's ``id`` when ``ids`` knows the task (``mtrl.validation.rows.row_ids``), else a name from
    the task."""
    row_id = (ids or {}).get(task_key(task))
    if row_id:
        return row_id
    info = task.get("info") if isinstance(task.get("info"), dict) else {}
    for value in (task.get("answer"), (info or {}).get("task_id"), task.get("task")):
        if isinstance(value, str) and value:
            return value
    return f"task {index + 1}"


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _health(groups: Sequence[Sequence[Episode]]) -> dict[str, dict[str, Any]]:
    report = signal_health.compute([[episode.result for episode in group] for group in groups])
    return {
        item.name: {
            "mean": item.mean,
            "mean_spread": item.mean_spread,
            "zero_spread_share": item.zero_spread_share,
            "groups": item.groups,
            "verdict": signal_health.verdict(item.zero_spread_share, item.groups),
        }
        for item in [report.aggregate, *report.components.values()]
    }


def episode_figures(episodes: Sequence[Episode]) -> dict[str, float]:
    return {
        **evaluation_figures([e.result for e in episodes]),
        "success_rate": _mean([1.0 if e.result.success else 0.0 for e in episodes]),
        "reward_mean": _mean([e.result.reward for e in episodes]),
        "tokens_per_episode": _mean([float(e.prompt_tokens + e.completion_tokens) for e in episodes]),
        "completion_tokens_per_episode": _mean([float(e.completion_tokens) for e in episodes]),
        "turns_per_episode": _mean([float(e.turns) for e in episodes]),
        "seconds_per_episode": _mean([e.seconds for e in episodes]),
    }


def summarize_rollouts(
    groups: Sequence[Sequence[Episode]],
    heldout: Sequence[Episode],
    *,
    group_size: int,
    ids: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Per group and overall: reward and component means, spread, flat groups; held-out success; transcripts."""
    per_group: list[dict[str, Any]] = []
    for index, group in enumerate(groups):
        health = _health([group])
        components = sorted({name for e in group for name in e.result.components})
        per_group.append(
            {
                "task": task_label(group[0].task, index, ids),
                "reward_mean": _mean([e.result.reward for e in group]),
                "components": {name: _mean([e.result.components.get(name, 0.0) for e in group]) for name in components},
                "reward_spread": health["reward"]["mean_spread"],
                "flat": sorted(name for name, h in health.items() if h["zero_spread_share"] >= 1.0),
                "success_rate": _mean([1.0 if e.result.success else 0.0 for e in group]),
            }
        )
    everything = [episode for group in groups for episode in group]
    overall_health = _health(groups)
    flat = [name for name, h in overall_health.items() if h["verdict"] == signal_health.FLAT]
    transcripts = []
    for index, group in enumerate(groups[:TRANSCRIPT_GROUPS]):
        ranked = sorted(group, key=lambda e: e.result.reward)
        transcripts.append(
            {
                "task": task_label(group[0].task, index, ids),
                "best": ranked[-1].to_dict(),
                "worst": ranked[0].to_dict(),
            }
        )
    return {
        "group_size": group_size,
        "groups": per_group,
        "overall": {
            "episodes": len(everything),
            **episode_figures(everything),
            "components": {
                name: health["mean"] for name, health in overall_health.items() if name != signal_health.AGGREGATE
            },
        },
        "signal_health": overall_health,
        "threshold": signal_health.FLAT_WARNING_SHARE,
        "flat_components": flat,
        "callouts": [signal_health.explain_flat(name, overall_health[name]["zero_spread_share"]) for name in flat],
        "heldout": {"tasks": len(heldout), **episode_figures(heldout)},
        "transcripts": transcripts,
    }


def rollouts_png(summary: dict[str, Any], *, title: str) -> bytes:
    """Left: mean reward ± within-group spread per task group. Right: each component's zero-spread share."""
    plt = pyplot()
    figure, (groups_axis, health_axis) = plt.subplots(1, 2, figsize=(10, 4.2), dpi=110)
    try:
        groups = summary["groups"]
        positions = list(range(len(groups)))
        groups_axis.errorbar(
            positions,
            [g["reward_mean"] for g in groups],
            yerr=[g["reward_spread"] for g in groups],
            fmt="o",
            capsize=3,
            color="tab:blue",
        )
        groups_axis.set_xticks(positions, [g["task"] for g in groups], rotation=45, ha="right", fontsize=7)
        groups_axis.set_xlabel("task group")
        groups_axis.set_ylabel("reward: group mean ± within-group spread")
        health = summary["signal_health"]
        names = list(health)
        shares = [health[name]["zero_spread_share"] for name in names]
        colors = ["tab:red" if health[name]["verdict"] == signal_health.FLAT else "tab:green" for name in names]
        health_axis.bar(names, shares, color=colors)
        health_axis.axhline(summary["threshold"], color="black", linestyle="--", linewidth=1, label="flat threshold")
        health_axis.set_ylim(0, 1.05)
        health_axis.set_xlabel("reward component")
        health_axis.set_ylabel("share of groups with zero spread")
        health_axis.legend(fontsize=8)
        health_axis.tick_params(axis="x", labelrotation=30, labelsize=8)
        figure.suptitle(title, fontsize=10)
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
        return buffer.getvalue()
    finally:
        plt.close(figure)


def curve_png(history: Sequence[dict[str, Any]], evaluations: Sequence[dict[str, Any]], *, title: str) -> bytes:
    """Training reward per GRPO step (line) and held-out success at the steps it was measured (points)."""
    return learning_curve(
        steps=[int(record["step"]) for record in history],
        rewards=[float(record["reward_mean"]) for record in history],
        train_success=None,
        eval_steps=[int(entry["step"]) for entry in evaluations],
        eval_success=[float(entry["success_rate"]) for entry in evaluations],
        title=title,
    )
