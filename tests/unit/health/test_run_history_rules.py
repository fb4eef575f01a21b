"""What happened in the middle of a finished run stays in its verdict (issue 38 item 9), through ``mtrl health FILE``:
a stall that later recovered (a gap of many times the median step time between two steps) and a collapse of the turns
per episode to about a fifth of their early level, each reported with the step where it happened."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mtrl.cli import app
from mtrl.health.rules import evaluate
from mtrl.health.signals import SignalRow, Signals, render_signals
from tests.unit.health.curves import START, STEP_SECONDS, curve


def health_json(tmp_path: Path, signals: Signals, *extra: str) -> tuple[int, dict[str, Any]]:
    path = tmp_path / "signals.jsonl"
    path.write_text(render_signals(signals.header, signals.rows), encoding="utf-8")
    result = CliRunner().invoke(app, ["health", str(path), "--json", *extra])
    return result.exit_code, json.loads(result.stdout)


def with_gap(signals: Signals, after_step: int, gap_seconds: float) -> Signals:
    """The same run, its steps after ``after_step`` shifted by a gap of ``gap_seconds`` instead of one step time."""
    rows = []
    for row in signals.rows:
        seconds = STEP_SECONDS * row.step + (gap_seconds - STEP_SECONDS if row.step > after_step else 0.0)
        time = (START + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")
        rows.append(SignalRow(**{**row.to_dict(), "time": time}))
    return Signals(header=signals.header, rows=tuple(rows))


def fired(document: dict[str, Any], rule: str) -> list[tuple[str, int]]:
    return [(item["level"], item["step"]) for item in document["fired"] if item["rule"] == rule]


@pytest.mark.parametrize(("after_step", "gap_minutes"), [(50, 40), (7, 16), (99, 180)])
def test_a_stall_that_recovered_is_reported_at_its_step_on_the_finished_run(
    tmp_path: Path, after_step: int, gap_minutes: float
) -> None:
    code, document = health_json(tmp_path, with_gap(curve(100), after_step, gap_minutes * 60))
    assert fired(document, "stalled") == [("warn", after_step)]
    assert document["verdict"] == "warn"
    assert code == 1
    stalled = document["rules"]["stalled"]
    assert stalled["worst"] == "warn"
    assert stalled["level"] == "ok"  # it recovered: not stalled now
    assert stalled["stalls"] == [{"after_step": after_step, "seconds": gap_minutes * 60}]


def test_a_recovered_stall_also_shows_on_a_live_run_without_being_current(tmp_path: Path) -> None:
    signals = with_gap(curve(100, steps=60), 30, 3600)
    document = evaluate(signals, now=START + timedelta(seconds=STEP_SECONDS * 61 + 3540), ended=False)
    assert fired(document, "stalled") == [("warn", 30)]
    assert (document["verdict"], document["current"]) == ("warn", "ok")


@pytest.mark.parametrize("gap_minutes", [14, 2.5])
def test_a_gap_under_the_stall_limit_is_not_a_stall(tmp_path: Path, gap_minutes: float) -> None:
    # The limit is max(3 x the median step time, 15 min): a 14-minute gap in a 1-minute run is under the floor.
    code, document = health_json(tmp_path, with_gap(curve(100), 50, gap_minutes * 60))
    assert document["fired"] == []
    assert code == 0


def _turns_down_to(fraction: float, *, from_step: int, rising: bool) -> Any:
    def change(step: int, values: dict[str, Any]) -> dict[str, Any]:
        if step >= from_step:
            values["mean_turns"] *= fraction
        if not rising:  # the reward's noise only, around a level
            values["reward_mean"] = 0.5 + (values["reward_mean"] - 0.2 - 0.6 * step / 100)
            values["evaluation_mean"] = None
        return values

    return change


@pytest.mark.parametrize("rising", [True, False], ids=["reward rising", "reward flat"])
@pytest.mark.parametrize("fraction", [0.2, 0.1])
def test_turns_collapsing_to_a_fifth_are_reported_at_the_step_whatever_the_reward(
    tmp_path: Path, rising: bool, fraction: float
) -> None:
    code, document = health_json(tmp_path, curve(100, change=_turns_down_to(fraction, from_step=60, rising=rising)))
    assert fired(document, "turn_collapse") == [("warn", 62)]  # 3 steps in a row: 60, 61, 62
    assert document["verdict"] in {"warn", "stop"}
    assert code == 1


def test_turns_halving_while_the_reward_rises_is_still_learning(tmp_path: Path) -> None:
    code, document = health_json(tmp_path, curve(100, change=_turns_down_to(0.45, from_step=60, rising=True)))
    assert document["fired"] == []
    assert code == 0


def test_a_run_that_stalls_again_and_again_lists_its_first_stalls_and_counts_them_all(tmp_path: Path) -> None:
    signals = curve(100)
    rows, seconds = [], 0.0
    for row in signals.rows:  # an hour after every third step, a minute otherwise (the median stays a minute)
        seconds += 3600 if row.step > 1 and (row.step - 1) % 3 == 0 else STEP_SECONDS
        time = (START + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")
        rows.append(SignalRow(**{**row.to_dict(), "time": time}))
    document = evaluate(Signals(header=signals.header, rows=tuple(rows)), ended=True)
    stalled = document["rules"]["stalled"]
    assert stalled["stall_count"] == 33
    assert [stall["after_step"] for stall in stalled["stalls"]] == list(range(3, 61, 3))
    assert len(fired(document, "stalled")) == 20
