"""`mtrl health FILE [--json]` through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from mtrl.cli import app
from mtrl.health.signals import SignalHeader, render_signals
from tests.unit.health.curves import curve

runner = CliRunner()


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "signals.jsonl"
    path.write_text(text, encoding="utf-8")
    return path


def _flat(step: int, values: dict[str, Any]) -> dict[str, Any]:
    return {**values, "reward_spread_mean": 0.0, "zero_spread_share": 1.0}


def test_a_healthy_run_exits_0_and_names_every_rule(tmp_path: Path) -> None:
    signals = curve(100)
    path = _write(tmp_path, render_signals(signals.header, signals.rows))
    result = runner.invoke(app, ["health", str(path)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "verdict: ok" in result.stdout
    for rule in ("flat_groups", "plateau", "eval_divergence", "stalled", "incomplete"):
        assert rule in result.stdout
    assert "1-5 warm-up, 6-100 ok" in result.stdout


def test_json_output_is_the_verdict_document_and_flat_groups_fire(tmp_path: Path) -> None:
    signals = curve(100, change=_flat)
    path = _write(tmp_path, render_signals(signals.header, signals.rows))
    result = runner.invoke(app, ["health", str(path), "--json"])
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["verdict"] == "stop"
    assert document["fired"] == [
        {"rule": "flat_groups", "level": "warn", "step": 8, "value": 1.0, "threshold": 0.6},
        {"rule": "flat_groups", "level": "stop", "step": 10, "value": 1.0, "threshold": 0.9},
    ]
    assert document["rules"]["flat_groups"]["segments"] == [
        {"from": 1, "to": 5, "level": "warm-up"},
        {"from": 6, "to": 7, "level": "ok"},
        {"from": 8, "to": 9, "level": "warn"},
        {"from": 10, "to": 100, "level": "stop"},
    ]


def test_human_output_says_where_a_rule_fired(tmp_path: Path) -> None:
    signals = curve(100, change=_flat)
    path = _write(tmp_path, render_signals(signals.header, signals.rows))
    result = runner.invoke(app, ["health", str(path)], env={"COLUMNS": "250"})
    assert result.exit_code == 1
    assert "verdict: stop" in result.stdout
    assert "flat_groups → warn at step 8: value 1, threshold 0.6" in result.stdout
    assert "flat_groups → stop at step 10: value 1, threshold 0.9" in result.stdout


def test_a_zero_step_run_is_incomplete_unless_still_running(tmp_path: Path) -> None:
    path = _write(tmp_path, render_signals(SignalHeader(planned_steps=30, group_size=8), []))
    finished = runner.invoke(app, ["health", str(path), "--json"])
    assert finished.exit_code == 1
    assert json.loads(finished.stdout)["verdict"] == "incomplete"
    running = runner.invoke(app, ["health", str(path), "--json", "--running"])
    assert running.exit_code == 0
    assert json.loads(running.stdout)["verdict"] == "ok"


def test_a_bad_file_is_a_usage_error_naming_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, '{"planned_steps": 3}\n{"step": 1, "zero_spread_share": 2}\n')
    result = runner.invoke(app, ["health", str(path), "--json"])
    assert result.exit_code == 2
    assert "line 2: 'zero_spread_share' is a share" in json.loads(result.stdout)["error"]
    missing = runner.invoke(app, ["health", str(tmp_path / "nope.jsonl")])
    assert missing.exit_code == 2
    assert "cannot read" in missing.stderr


def test_a_half_written_last_line_is_left_out_and_said(tmp_path: Path) -> None:
    signals = curve(40, steps=40)
    path = _write(tmp_path, render_signals(signals.header, signals.rows) + '{"step": 41, "rew')
    result = runner.invoke(app, ["health", str(path), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["truncated_tail"] is True
    assert document["last_step"] == 40
    human = runner.invoke(app, ["health", str(path)], env={"COLUMNS": "250"})
    assert "partially written" in human.stdout
