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
