"""`mtrl env try`: exit codes, JSON summary, signal-health verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from mtrl.cli import app as cli
from mtrl.cli import env_try
from tests.made_env import add_train_row_to_eval
from tests.unit.local.conftest import sample_path


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _group() -> None:
        """A stand-in for the ``env`` command group."""

    env_try.register(app)
    return app


def _write(path: Path, answers: list[str]) -> Path:
    path.write_text(
        "".join(
            json.dumps({"id": f"r{i}", "metadata": {"prompt": "Guess the word", "answer": a}}) + "\n"
            for i, a in enumerate(answers)
        )
    )
    return path


def test_json_summary_reports_before_after_and_signal_health(tmp_path: Path) -> None:
    train = sample_path("train.jsonl")
    held_out = tmp_path / "eval.jsonl"
    held_out.write_text("\n".join(sample_path("eval.jsonl").read_text().splitlines()[:8]) + "\n")
    result = CliRunner().invoke(
        _app(),
        [
            "try",
            "wordle",
            "--steps",
            "1",
            "--dataset",
            str(train),
            "--eval-dataset",
            str(held_out),
            "--output",
            str(tmp_path / "out"),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["env_id"] == "wordle"
    assert summary["steps"] == 1
    assert summary["heldout"]["tasks"] == 8
    assert 0 <= summary["heldout"]["success_before"] <= 1
    assert summary["heldout"]["success_after"] is not None
    # The external evaluation is its own figure (wordle's EVALUATION: solved or not), beside the reward.
    assert summary["heldout"]["evaluation_measure"] == "evaluation"
    assert summary["heldout"]["evaluation_before"] == summary["heldout"]["success_before"]  # wordle: solved = success
    assert 0 <= summary["heldout"]["evaluation_after"] <= 1
    assert set(summary["signal_health"]) == {"reward", "outcome", "shaping"}
    assert Path(summary["plot"]).is_file()
    assert (tmp_path / "out" / "summary.json").is_file()


def test_human_output_and_refusing_to_overwrite(tmp_path: Path) -> None:
    train = _write(tmp_path / "t.jsonl", ["crane", "slate", "bring", "proud", "tasty", "sound"])
    args = ["try", "wordle", "--steps", "1", "--dataset", str(train), "--output", str(tmp_path / "o")]
    first = CliRunner().invoke(_app(), args)
    assert first.exit_code == 0, first.output
    # The held-out external evaluation before → after, next to success and the reward (not the score).
    assert "held-out (" in first.stdout
    assert "evaluation" in first.stdout
    assert "success" in first.stdout
    assert "(training signal, not the score)" in first.stdout
    assert "not a language model" in first.stdout  # the features policy says what it is
    assert "signal health" in first.stdout
    again = CliRunner().invoke(_app(), args)
    assert again.exit_code == 2
    assert "already holds a run" in again.output


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    unknown = CliRunner().invoke(_app(), ["try", "no_such_env", "--json"])
    assert unknown.exit_code == 2
    assert "no_such_env" in json.loads(unknown.stdout)["error"]
    missing = CliRunner().invoke(_app(), ["try", "wordle", "--dataset", str(tmp_path / "nope.jsonl")])
    assert missing.exit_code == 2
    assert "does not exist" in missing.output
    bad_steps = CliRunner().invoke(_app(), ["try", "wordle", "--steps", "-1", "--json"])
    assert bad_steps.exit_code == 2
    assert "steps" in json.loads(bad_steps.stdout)["error"]


def test_invalid_dataset_exits_1(tmp_path: Path) -> None:
    train = _write(tmp_path / "t.jsonl", ["crane", "zzzzz"])
    result = CliRunner().invoke(_app(), ["try", "wordle", "--dataset", str(train), "--output", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert "zzzzz" in result.output


def test_registered_under_mtrl_env() -> None:
    from mtrl.cli import app

    result = CliRunner().invoke(app, ["env", "try", "--help"])
    assert result.exit_code == 0
    assert "--steps" in result.output


def test_features_on_an_environment_without_a_features_agent_is_refused(
    made_env_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 38 item 11: it silently trained hf:tiny-random and printed "policy: features".
    monkeypatch.setenv("MTRL_RUNS_DIR", str(tmp_path / "runs"))
    result = CliRunner().invoke(cli, ["env", "try", "my_env", "--policy", "features"])
    assert result.exit_code == 2, result.output
    assert "--policy features: there is no hand-written features agent for 'my_env'" in " ".join(result.output.split())
    assert not (tmp_path / "runs").exists()  # nothing written


def test_without_output_a_try_writes_under_the_users_state_directory_not_the_working_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 38 item 11: runs-local/ was written in the working directory (the repository, run from its root).
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("MTRL_RUNS_DIR", raising=False)
    result = CliRunner().invoke(cli, ["env", "try", "wordle", "--steps", "1"])
    assert result.exit_code == 0, result.output
    assert "1 GRPO step in" in result.stdout  # (issue 38 item 16: not "1 GRPO steps")
    assert not (work / "runs-local").exists()
    (made,) = (tmp_path / "state" / "mtrl" / "runs-local").iterdir()
    assert made.name.startswith("wordle-try-")
    assert (made / "summary.json").is_file()


def test_a_sample_pair_a_run_would_refuse_is_refused_before_training(
    made_env_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 38 item 13: env try trained on a train/eval pair whose run the pipeline then refused.
    add_train_row_to_eval(made_env_root)
    monkeypatch.setenv("MTRL_RUNS_DIR", str(tmp_path / "runs"))
    result = CliRunner().invoke(cli, ["env", "try", "my_env"])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "a run would refuse these datasets:" in text
    assert "the same prompt and answer are in the evaluation dataset (line 7)" in text
    assert not (tmp_path / "runs").exists()
