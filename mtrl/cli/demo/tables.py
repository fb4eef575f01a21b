"""What the demo prints about a run: its summary, the held-out evaluation rows, signal health, validation errors."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from rich.table import Table

from mtrl.contracts.text import plural
from mtrl.envs.registry import load_spec
from mtrl.health import signal_health
from mtrl.local.agents import agent_for
from mtrl.local.config import FEATURES, TrainConfig
from mtrl.local.policy import LogLinearPolicy
from mtrl.local.trainer import TaskSplit, Trainer

# The hand-set heuristic row: one weight by hand, no training — "guess a word still consistent with the clues".
HAND_SET_WEIGHTS = {"consistent": 1.0}


def summary_tables(summary: dict[str, Any], training: dict[str, Any] | None) -> list[Table]:
    run = Table(title=f"run {summary.get('run_id')}", show_header=False)
    run.add_column("what")
    run.add_column("value")
    settings = summary.get("settings") or {}
    run.add_row("status", str(summary.get("status")))
    run.add_row("backend / environment", f"{settings.get('backend')} / {settings.get('environment')}")
    run.add_row("duration", f"{_seconds(summary.get('duration_seconds'))}")
    phases = sorted((summary.get("phases") or {}).items(), key=lambda item: str(item[1].get("started_at")))
    for phase, entry in phases:
        run.add_row(f"  phase {phase}", f"{_seconds(entry.get('seconds'))}  {entry.get('outcome', '')}")
    run.add_row("resources left behind", str(len(summary.get("resources_remaining") or [])))
    tables = [run]
    if training:
        tables.append(evaluation_table(training))
        health = Table(title="reward signal health (GRPO learns only from spread inside a group)")
        for column in (
            "component",
            f"{signal_health.SPREAD_HEADING}, step 1",
            f"{signal_health.ZERO_SPREAD_HEADING}, step 1",
            f"{signal_health.ZERO_SPREAD_HEADING}, whole run",
            f"verdict, step 1 (flat: ≥ {signal_health.FLAT_WARNING_SHARE:.0%})",
        ):
            health.add_column(column)
        first = training.get("signal_health_first_step") or {}
        whole = training.get("signal_health") or {}
        for name in sorted(set(first) | set(whole)):
            early, overall = first.get(name) or {}, whole.get(name) or {}
            if isinstance(early, dict) or isinstance(overall, dict):
                health.add_row(
                    name,
                    _fmt(early.get("mean_spread")),
                    _pct(early.get("zero_spread_share")),
                    _pct(overall.get("zero_spread_share")),
                    signal_health.verdict(float(early.get("zero_spread_share", 1.0))) if early else "—",
                )
        tables.append(health)
    return tables


def evaluation_table(training: dict[str, Any]) -> Table:
    """Rows on the same held-out tasks: untrained, (wordle) the hand-set heuristic, trained."""
    heldout = training.get("heldout") or {}
    config = training.get("config") or {}
    env_id = str(training.get("env_id") or config.get("env_id") or "wordle")
    policy = str(config.get("policy") or FEATURES)
    unit = "word" if env_id == "wordle" else "task"
    evaluated = plural(int(heldout.get("tasks") or 0), unit)
    table = Table(
        title=f"held-out evaluation: the sample's eval.jsonl, {evaluated} (the environment's own success criterion)"
    )
    for column in ("policy", "success rate" if unit == "task" else "solve rate", "mean reward"):
        table.add_column(column)
    untrained = "untrained (all weights 0)" if policy == FEATURES else f"untrained ({policy}, no adapter)"
    table.add_row(untrained, _pct(heldout.get("success_before")), _fmt(heldout.get("reward_before")))
    if env_id == "wordle" and policy == FEATURES:
        heuristic = training.get("heuristic") or {}
        weights = ", ".join(f"{name} = {value:g}" for name, value in HAND_SET_WEIGHTS.items())
        table.add_row(
            f"hand-set heuristic ({weights}, no training)",
            _pct(heuristic.get("success_rate")),
            _fmt(heuristic.get("reward_mean")),
        )
    steps = training.get("steps")
    grpo = plural(int(steps or 0), "GRPO step")
    trained = f"trained ({grpo})" if policy == FEATURES else f"trained ({grpo}, LoRA)"
    table.add_row(trained, _pct(heldout.get("success_after")), _fmt(heldout.get("reward_after")))
    return table


def heuristic_evaluation(training: dict[str, Any], holdout: list[dict[str, Any]]) -> dict[str, Any]:
    """The hand-set heuristic on the run's held-out tasks, evaluated exactly as the run evaluated its policy."""
    config = TrainConfig(**training["config"])
    agent = agent_for(config.env_id)
    theta = np.zeros(len(agent.feature_names))
    for name, value in HAND_SET_WEIGHTS.items():
        theta[agent.feature_names.index(name)] = value
    trainer = Trainer(
        load_spec(config.env_id), agent, TaskSplit(train=holdout, holdout=holdout), env_args=config.env_args
    )
    return trainer.evaluate(LogLinearPolicy(agent.feature_names, theta), step=0, config=config)


def validation_table(errors: list[dict[str, Any]]) -> Table:
    """The rejected dataset's errors (``validation.json``), each with its line number."""
    table = Table(title="validation.json: errors with line numbers")
    table.add_column("line", justify="right")
    table.add_column("error")
    for error in errors:
        table.add_row(str(error.get("line") or "—"), str(error.get("message")))
    return table


def _seconds(value: Any) -> str:
    return "—" if value is None else f"{float(value):.1f} s"


def _pct(value: Any) -> str:
    return "—" if value is None else f"{100 * float(value):.0f}%"


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3f}"
    return json.dumps(value) if isinstance(value, dict | list) else str(value)
