"""`mtrl env list` and `mtrl env play`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mtrl.cli import app

runner = CliRunner()


def test_list_json() -> None:
    result = runner.invoke(app, ["env", "list", "--json"])
    assert result.exit_code == 0
    rows = {row["env_id"]: row for row in json.loads(result.stdout)}
    assert rows["wordle"]["source"] == "builtin"
    assert rows["ask_to_code"]["description"]
    assert "template" not in rows
    with_template = json.loads(runner.invoke(app, ["env", "list", "--all", "--json"]).stdout)
    assert {"env_id": "template", "source": "custom"}.items() <= next(
        row for row in with_template if row["env_id"] == "template"
    ).items()


def test_play_wordle_prints_feedback_and_components() -> None:
    result = runner.invoke(
        app, ["env", "play", "wordle", "--answer", "beach", "--action", "raise", "--action", "beach"]
    )
    assert result.exit_code == 0, result.output
    assert "RAISE -> XYXXY" in result.stdout
    assert "solved it in 2" in result.stdout
    assert "outcome" in result.stdout
    assert "shaping" in result.stdout


def test_play_json_and_actions_from_stdin() -> None:
    result = runner.invoke(app, ["env", "play", "wordle", "--answer", "beach", "--json"], input="raise\nbeach\nextra\n")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["done"] is True
    assert document["unused_actions"] == 1
    assert document["result"]["components"]["outcome"] == pytest.approx(1.45)
    roles = [turn["role"] for turn in document["transcript"]]
    assert roles == ["environment", "policy", "environment", "policy", "environment"]


def test_play_errors_have_distinct_exit_codes() -> None:
    invalid = runner.invoke(app, ["env", "play", "wordle", "--answer", "zzzzz", "--action", "raise", "--json"])
    assert invalid.exit_code == 1
    assert "not in the wordle answer list" in json.loads(invalid.stdout)["error"]
    unknown = runner.invoke(app, ["env", "play", "nope", "--action", "x"])
    assert unknown.exit_code == 2
    bad_json = runner.invoke(app, ["env", "play", "wordle", "--task", "{oops", "--action", "x"])
    assert bad_json.exit_code == 2
    no_actions = runner.invoke(app, ["env", "play", "wordle", "--answer", "beach"], input="")
    assert no_actions.exit_code == 2


def test_check_runs_the_smoke_episode() -> None:
    ok = runner.invoke(app, ["env", "check", "wordle", "--json"])
    assert ok.exit_code == 0
    assert json.loads(ok.stdout) == {"env_id": "wordle", "ok": True, "problems": []}
    assert runner.invoke(app, ["env", "check", "nope"]).exit_code == 2


def test_check_reports_contract_problems(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    broken = tmp_path / "custom-environments" / "half_done"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('ENV_ID = "half_done"\n', encoding="utf-8")
    monkeypatch.setenv("MTRL_PROJECT_ROOT", str(tmp_path))
    result = runner.invoke(app, ["env", "check", "half_done", "--json"])
    assert result.exit_code == 1
    assert "missing module attribute 'make_env'" in json.loads(result.stdout)["problems"]
