"""`mtrl env list` and `mtrl env play`."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mtrl.cli import app
from mtrl.envs.registry import project_root
from tests.made_env import add_train_row_to_eval

runner = CliRunner()
REPO = Path(__file__).resolve().parents[3]


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
    assert roles == ["user", "assistant", "user", "assistant", "user"]


def test_play_errors_have_distinct_exit_codes() -> None:
    invalid = runner.invoke(app, ["env", "play", "wordle", "--answer", "zzzzz", "--action", "raise", "--json"])
    assert invalid.exit_code == 1
    assert "not in the wordle answer list" in json.loads(invalid.stdout)["error"]
    unknown = runner.invoke(app, ["env", "play", "nope", "--action", "x"])
    assert unknown.exit_code == 2
    bad_json = runner.invoke(app, ["env", "play", "wordle", "--task", "{oops", "--action", "x"])
    assert bad_json.exit_code == 2
    no_actions = runner.invoke(app, ["env", "play", "wordle", "--answer", "beach", "--json"], input="")
    assert no_actions.exit_code == 2


def test_check_runs_the_smoke_episode() -> None:
    ok = runner.invoke(app, ["env", "check", "wordle", "--json"])
    assert ok.exit_code == 0
    document = json.loads(ok.stdout)
    assert (document["env_id"], document["ok"], document["problems"]) == ("wordle", True, [])
    assert document["smoke_reward"] > 1.0  # EXAMPLE_ACTIONS solve the example word: the solved tier
    assert runner.invoke(app, ["env", "check", "nope"]).exit_code == 2
    human = runner.invoke(app, ["env", "check", "wordle"])
    assert f"smoke episode scored reward {document['smoke_reward']:+.3f}" in human.stdout  # issue 24 friction 10


def test_check_reports_contract_problems(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    broken = tmp_path / "custom-environments" / "half_done"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('ENV_ID = "half_done"\n', encoding="utf-8")
    monkeypatch.setenv("MTRL_PROJECT_ROOT", str(tmp_path))
    result = runner.invoke(app, ["env", "check", "half_done", "--json"])
    assert result.exit_code == 1
    assert "missing module attribute 'make_env'" in json.loads(result.stdout)["problems"]


def _read_until(process: subprocess.Popen[bytes], marker: str, timeout_s: float = 60.0) -> str:
    """Read the game's output as it arrives (no EOF needed) until ``marker`` shows up."""
    assert process.stdout is not None
    seen = b""
    deadline = time.monotonic() + timeout_s
    while marker.encode() not in seen:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"timed out waiting for {marker!r}; got {seen.decode(errors='replace')!r}"
        ready, _, _ = select.select([process.stdout], [], [], remaining)
        if ready:
            chunk = os.read(process.stdout.fileno(), 4096)
            assert chunk, f"the game ended before {marker!r}; got {seen.decode(errors='replace')!r}"
            seen += chunk
    return seen.decode()


def _game(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "mtrl", "env", "play", "wordle", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=project_root(),
    )


def test_play_is_a_real_game_line_by_line() -> None:
    game = _game("--answer", "beach")
    assert game.stdin is not None
    try:
        first = _read_until(game, "You have 6 guesses")  # the first observation before any input
        assert "RAISE" not in first
        game.stdin.write(b"raise\n")
        game.stdin.flush()
        assert "RAISE -> XYXXY" in _read_until(game, "XYXXY")  # feedback for this guess, before the next one
        game.stdin.write(b"beach\n")
        game.stdin.flush()
        rest = _read_until(game, "the answer was: BEACH")
        assert "success" in rest
        assert game.wait(timeout=30) == 0
    finally:
        game.kill()


def test_play_without_a_task_draws_a_random_sample_word_and_reveals_it() -> None:
    sample = {
        json.loads(line)["metadata"]["answer"].upper()
        for name in ("train.jsonl", "eval.jsonl")
        for line in (project_root() / "environments" / "wordle" / "sample" / name).read_text().splitlines()
        if line.strip()
    }
    answers = set()
    for seed in ("1", "2", "3"):
        game = _game("--seed", seed)
        out, _ = game.communicate(b"", timeout=60)
        assert game.returncode == 0, out
        answers.add(out.decode().rsplit("the answer was: ", 1)[1].split()[0])
    assert answers <= sample
    assert len(answers) > 1  # not always the example's word


BROKEN_IN_FOUR_WAYS = """
from mtrl.contracts.environment import EpisodeResult, StepResult

ENV_ID = "four_faults"
EXAMPLE_TASK = {"prompt": "say hi"}
EXAMPLE_ACTIONS = ["hi"]

def validate_task(metadata):
    return [] if metadata.get("answer") else ["'answer' is required"]

class Env:
    done = False
    def reset(self, task):
        return task["prompt"]
    def step(self, action):
        raise RuntimeError("step is not written yet")
    def result(self):
        return EpisodeResult(reward=0.0, components={"hit": 0.0})

def make_env(**kwargs):
    return Env()

def load_environment(**kwargs):
    return None
"""


def _four_faults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    package = tmp_path / "custom-environments" / "four_faults"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(BROKEN_IN_FOUR_WAYS, encoding="utf-8")
    monkeypatch.setenv("MTRL_PROJECT_ROOT", str(tmp_path))
    return tmp_path


def test_check_reports_every_problem_at_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Issue 24, friction 9: one problem per run (three runs to see three), and a load_environment returning None passed.
    _four_faults(monkeypatch, tmp_path)
    result = runner.invoke(app, ["env", "check", "four_faults", "--json"])
    assert result.exit_code == 1, result.output
    problems = json.loads(result.stdout)["problems"]
    assert "missing module attribute 'DESCRIPTION'" in problems
    assert "EXAMPLE_TASK: 'answer' is required" in problems
    assert any("smoke episode raised" in p and "step is not written yet" in p for p in problems), problems
    assert any(p.startswith("load_environment() returned None") for p in problems), problems
    human = runner.invoke(app, ["env", "check", "four_faults"])
    assert "4 problem(s) to fix in 'four_faults'" in human.stdout


def test_synth_reports_a_broken_custom_environment_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Issue 24, friction 9: `cdk synth` printed a traceback. app.py is what `cdk synth` runs (CDK_CONTEXT_JSON is
    # how the CDK CLI hands it the context).
    root = _four_faults(monkeypatch, tmp_path)
    environ = {
        **os.environ,
        "MTRL_PROJECT_ROOT": str(root),
        "CDK_CONTEXT_JSON": json.dumps({"use_custom_env": True, "custom_env_id": "four_faults"}),
        "CDK_OUTDIR": str(tmp_path / "cdk.out"),
    }
    synth = subprocess.run(
        [sys.executable, "app.py"], cwd=REPO, env=environ, capture_output=True, text=True, check=False
    )
    assert synth.returncode == 2, synth.stderr[-3000:]
    assert "Traceback" not in synth.stderr
    assert "custom environment 'four_faults'" in synth.stderr
    assert "load_environment() returned None" in synth.stderr
    assert "missing module attribute 'DESCRIPTION'" in synth.stderr


def test_play_shows_the_system_prompt_the_model_is_given() -> None:
    # Issue 24, friction 10: `env play` must show what a policy is told before the first observation.
    played = runner.invoke(app, ["env", "play", "sop_support", "--action", "hello"])
    assert played.exit_code == 0, played.output
    from mtrl.envs.registry import load_spec

    first_line = load_spec("sop_support").system_prompt.splitlines()[0]
    assert played.stdout.startswith("[system] ")
    assert first_line[:60] in played.stdout.replace("\n", " ")


def test_check_refuses_sample_datasets_a_run_would_refuse(made_env_root: Path) -> None:
    # Issue 38 item 13: env check passed a sample pair whose run the pipeline refused (a row in both files).
    assert runner.invoke(app, ["env", "check", "my_env"]).exit_code == 0
    add_train_row_to_eval(made_env_root)
    result = runner.invoke(app, ["env", "check", "my_env", "--json"])
    assert result.exit_code == 1, result.output
    (problem,) = json.loads(result.stdout)["problems"]
    assert problem.startswith("sample dataset: ")
    assert "train.jsonl:line 1: the same prompt and answer are in the evaluation dataset (line 7)" in problem
