"""`mtrl validate`: exit 0 valid, 1 invalid (line-numbered errors), 2 usage."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from mtrl.cli import app
from tests.made_env import add_train_row_to_eval

RUNNER = CliRunner()
GOOD = '{"id": "a", "metadata": {"prompt": "Guess", "answer": "crane"}}\n'


def test_valid_file(tmp_path: Path) -> None:
    path = tmp_path / "good.jsonl"
    path.write_text(GOOD)
    result = RUNNER.invoke(app, ["validate", str(path), "--env", "wordle"])
    assert result.exit_code == 0, result.output
    assert "valid" in result.output


def test_invalid_file_lists_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(GOOD + '{"id": "a", "metadata": {"prompt": "Guess", "answer": "zzzzz"}}\n{oops\n')
    result = RUNNER.invoke(app, ["validate", str(path), "--env", "wordle"])
    assert result.exit_code == 1
    assert "line 2: id 'a' repeats the id of line 1" in result.output
    assert "line 3: not valid JSON" in result.output


def test_json_report(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": 1, "metadata": {"prompt": "x", "answer": "crane"}}\n')
    result = RUNNER.invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["valid"] is False
    assert document["train"]["errors"] == [
        {"line": 1, "code": "bad_id", "message": "'id' must be a string, got a number"}
    ]


def test_usage_errors(tmp_path: Path) -> None:
    assert RUNNER.invoke(app, ["validate", str(tmp_path / "missing.jsonl")]).exit_code == 2
    path = tmp_path / "good.jsonl"
    path.write_text(GOOD)
    result = RUNNER.invoke(app, ["validate", str(path), "--env", "chess", "--json"])
    assert result.exit_code == 2
    assert "no environment 'chess'" in json.loads(result.stdout)["error"]
    assert RUNNER.invoke(app, ["validate", str(path), "--eval-split", "0.9"]).exit_code == 2


def test_without_env_the_deployments_default_environment_checks_the_rows(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"id": "a", "metadata": {"prompt": "Guess", "answer": "zzzzz"}}\n')
    result = RUNNER.invoke(app, ["validate", str(path)])  # cdk.json's run_environment: wordle
    assert result.exit_code == 1, result.output
    assert "not in the wordle answer list" in result.output
    assert "default environment 'wordle'" in result.output


def test_the_report_is_on_stdout_and_says_valid_once(tmp_path: Path) -> None:
    # Issue 38 items 12 and 16: `mtrl validate bad.jsonl | head` showed nothing (the report went to stderr), and a
    # valid file read "valid FILE: valid (…)".
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text(GOOD)
    bad.write_text(GOOD + "{oops\n")
    passed = RUNNER.invoke(app, ["validate", str(good), "--env", "wordle"])
    assert passed.exit_code == 0
    assert passed.stdout.strip() == f"{good}: valid (1 row, none held out from this file)"
    refused = RUNNER.invoke(app, ["validate", str(bad), "--env", "wordle"])
    assert refused.exit_code == 1
    assert "invalid" in refused.stdout
    assert "line 2: not valid JSON" in refused.stdout


def test_an_environments_sample_pair_is_checked_for_overlap(made_env_root: Path) -> None:
    # Issue 38 item 13: `mtrl validate sample/train.jsonl` passed a file whose run was refused for its overlap with
    # the sibling eval.jsonl the demo uploads with it.
    sample = made_env_root / "custom-environments" / "my_env" / "sample"
    assert RUNNER.invoke(app, ["validate", str(sample / "train.jsonl"), "--env", "my_env"]).exit_code == 0
    add_train_row_to_eval(made_env_root)
    result = RUNNER.invoke(app, ["validate", str(sample / "train.jsonl"), "--env", "my_env"])
    assert result.exit_code == 1, result.output
    assert "line 1: the same prompt and answer are in the evaluation dataset (line 7)" in result.stdout
    assert f"checking overlap with {sample / 'eval.jsonl'}" in result.stderr


def test_a_misspelt_environment_gets_a_did_you_mean(tmp_path: Path) -> None:
    path = tmp_path / "good.jsonl"
    path.write_text(GOOD)
    result = RUNNER.invoke(app, ["validate", str(path), "--env", "wordel"])
    assert result.exit_code == 2
    assert "no environment 'wordel'" in result.output
    assert "did you mean 'wordle'?" in result.output
