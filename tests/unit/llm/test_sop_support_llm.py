"""`mtrl env try sop_support --policy hf:tiny-random`: the language-model path runs on the long SOP prompt, on CPU."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from mtrl.cli import app
from mtrl.envs.registry import load_spec

SHORT = ["--max-new-tokens", "4", "--group-size", "3", "--tasks", "2", "--eval-tasks", "2", "--max-turns", "3"]


def test_tiny_random_plays_the_sample_and_the_report_calls_out_the_flat_reward(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["env", "try", "sop_support", "--policy", "hf:tiny-random", *SHORT, "--output", str(tmp_path / "o"), "--json"],
    )
    # A random model never writes a tool call or a <final_output>: every reward is the same (flat): reported, exit 0.
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["policy"] == "hf:tiny-random"
    assert summary["heldout"]["source"].endswith("sop_support/sample/eval.jsonl")
    assert summary["overall"]["episodes"] == 6
    assert set(summary["overall"]["components"]) == {"fields", "state", "procedure", "excess_calls"}
    assert summary["overall"]["tokens_per_episode"] > 1000  # the SOP, the tool schemas and the ticket were sent
    assert summary["signal_health"]["reward"]["verdict"] in {"flat", "signal"}
    rollouts = (tmp_path / "o" / "rollouts.jsonl").read_text().splitlines()
    assert len(rollouts) == 6
    assert load_spec("sop_support").system_prompt is not None


def test_the_human_report_shows_the_long_opening_once_per_task(tmp_path: Path) -> None:
    # Issue 24, friction 8: the ~45-line procedure and tool schema repeated in each of six transcripts, "16 more
    # turns" counted messages, identical best and worst were shown twice. Friction 10: --max-new-tokens defaults to
    # 64 (sop_support's reference actions need ~40 tokens) and the headings are the shared ones.
    short = ["--group-size", "2", "--tasks", "2", "--eval-tasks", "1", "--max-turns", "6"]
    result = CliRunner().invoke(
        app, ["env", "try", "sop_support", "--policy", "hf:tiny-random", *short, "--output", str(tmp_path / "o")]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["sampling"]["max_new_tokens"] == 64
    tasks = len(summary["transcripts"])
    assert result.stdout.count(": the opening message") == tasks
    assert result.stdout.count("more lines in rollouts.jsonl") == tasks  # the long opening is cut, once per task
    same = sum(1 for entry in summary["transcripts"] if entry["best"]["transcript"] == entry["worst"]["transcript"])
    headers = [line for line in result.stdout.splitlines() if line.startswith(("best", "worst"))]
    assert sum(1 for line in headers if line.startswith("best and worst (the same) rollout of")) == same
    assert len([line for line in headers if " rollout of " in line]) == same + 2 * (tasks - same)
    assert "more turns in rollouts.jsonl" not in result.stdout  # the old count of messages
    assert "zero-spread groups" in result.stdout
