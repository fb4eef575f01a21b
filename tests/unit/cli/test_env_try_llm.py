"""`mtrl env try` with a language-model policy: a template-made environment, wordle, GRPO steps with TRL + LoRA."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mtrl.cli import app
from tests.made_env import MADE_ENV

pytest.importorskip("torch", reason="the mtrl[llm] extra (make test installs it)")

SHORT = ["--max-new-tokens", "1", "--group-size", "3", "--tasks", "2", "--eval-tasks", "2", "--max-turns", "3"]


def _try(args: list[str]) -> tuple[int, dict[str, Any], str]:
    result = CliRunner().invoke(app, ["env", "try", *args, "--json"])
    document = json.loads(result.stdout) if result.stdout.strip().startswith("{") else {}
    return result.exit_code, document, result.output


def test_a_fresh_template_made_environment_runs_at_once_with_tiny_random(made_env_root: Path, tmp_path: Path) -> None:
    # No --policy: the new environment has no features agent, so the tiny random model checks the plumbing.
    code, summary, output = _try([MADE_ENV, *SHORT, "--output", str(tmp_path / "out")])
    assert code == 0, output
    assert summary["policy"] == "hf:tiny-random"
    assert summary["heldout"]["source"].endswith(f"{MADE_ENV}/sample/eval.jsonl")  # the sample's own eval set
    assert summary["heldout"]["tasks"] == 2
    # The template declares EVALUATION (exact match): the held-out evaluation is its own figure, beside the reward.
    assert summary["heldout"]["evaluation_measure"] == "evaluation"
    assert 0 <= summary["heldout"]["evaluation_mean"] <= 1
    # The sample's first tasks, named by their dataset row ids (issue 24 friction 5: not by the secret word).
    assert [group["task"] for group in summary["groups"]] == ["train-1", "train-2"]
    assert summary["overall"]["episodes"] == 6
    assert set(summary["overall"]["components"]) == {"correct", "closeness", "hint_cost"}
    assert summary["overall"]["tokens_per_episode"] > 0
    health = summary["signal_health"]
    assert set(health) == {"reward", "correct", "closeness", "hint_cost"}
    # The one verdict rule, and every flat component called out in plain words.
    for name, item in health.items():
        assert item["verdict"] == ("flat" if item["zero_spread_share"] >= summary["threshold"] else "signal"), name
    assert summary["threshold"] == 0.9
    flat = [name for name, item in health.items() if item["verdict"] == "flat"]
    assert summary["flat_components"] == flat
    assert len(summary["callouts"]) == len(flat)
    assert all(f"'{name}'" in text and "GRPO" in text for name, text in zip(flat, summary["callouts"], strict=True))
    assert summary["transcripts"]
    assert {"best", "worst"} <= set(summary["transcripts"][0])
    assert Path(summary["plots"]["signal"]).read_bytes().startswith(b"\x89PNG")
    assert len((tmp_path / "out" / "rollouts.jsonl").read_text().splitlines()) == 6


def test_wordle_with_tiny_random_and_the_human_report(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["env", "try", "wordle", "--policy", "hf:tiny-random", *SHORT, "--output", str(tmp_path / "o")]
    )
    # A random model often gives wordle a flat reward: the report says so, and that is no failure (no --strict).
    assert result.exit_code == 0, result.output
    assert "per task group" in result.stdout
    # The held-out external evaluation, success and the reward, each named: the reward is not the score.
    assert "held-out (2 tasks" in result.stdout
    assert "evaluation" in result.stdout
    assert "success" in result.stdout
    assert "(training signal, not the score)" in result.stdout
    assert "signal health" in result.stdout
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["signal_health"]["reward"]["verdict"] in {"flat", "signal"}


def _check_training(summary: dict[str, Any]) -> None:
    training = summary["training"]
    assert training["steps"] == 2
    assert [record["step"] for record in training["history"]] == [1, 2]
    for record in training["history"]:
        assert math.isfinite(record["loss"])
        assert record["episodes"] == training["tasks_per_step"] * summary["group_size"]
        assert set(record) >= {"reward_mean", "success_rate", "components", "reward_spread"}
    assert training["adapter_parameters"] > 0
    assert training["adapter_change_l2"] > 0  # the LoRA weights moved: gradients flowed through TRL's loss
    assert [entry["step"] for entry in training["evaluations"]] == [0, 2]
    assert training["heldout_evaluation_before"] == training["evaluations"][0]["evaluation_mean"]
    assert training["heldout_evaluation_after"] == training["evaluations"][-1]["evaluation_mean"]
    assert Path(summary["plots"]["training"]).read_bytes().startswith(b"\x89PNG")


def test_two_grpo_steps_on_a_template_made_environment(made_env_root: Path, tmp_path: Path) -> None:
    code, summary, output = _try(
        [MADE_ENV, "--policy", "hf:tiny-random", *SHORT, "--train-steps", "2", "--output", str(tmp_path / "t")]
    )
    assert code == 0, output
    _check_training(summary)


def test_two_grpo_steps_on_wordle(tmp_path: Path) -> None:
    # max-new-tokens 1: each reply is one word of the tiny vocabulary, often a playable guess, so rewards differ.
    args = ["wordle", "--policy", "hf:tiny-random", *SHORT, "--train-steps", "2", "--output", str(tmp_path / "w")]
    code, summary, output = _try(args)
    assert code in (0, 1), output
    assert summary["signal_health"]["reward"]["groups"] == 2
    _check_training(summary)


def test_usage_errors_name_the_option(tmp_path: Path) -> None:
    code, document, _ = _try(["wordle", "--policy", "openai:http://127.0.0.1:9/v1"])
    assert code == 2
    assert "--model" in document["error"]
    code, document, _ = _try(["wordle", "--policy", "hf:tiny-random", "--group-size", "1"])
    assert code == 2
    assert "--group-size" in document["error"]
    code, document, _ = _try(["wordle", "--policy", "hf:tiny-random", "--steps", "3"])
    assert code == 2
    assert "--train-steps" in document["error"]
    code, document, _ = _try(["wordle", "--policy", "features", "--train-steps", "2"])
    assert code == 2
    assert "--steps" in document["error"]


def test_progress_counts_episodes_and_ctrl_c_keeps_what_was_played(
    made_env_root: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    # Issue 24, friction 7: one spinner for minutes, and Ctrl-C exited silently with nothing written.
    done = CliRunner().invoke(app, ["env", "try", MADE_ENV, *SHORT, "--output", str(tmp_path / "done")])
    assert done.exit_code == 0, done.output
    assert "8/8 episodes" in done.output  # 2 tasks × 3 rollouts, then the 2 held-out tasks

    import mtrl.llm.tryout

    def interrupt(*_: Any, **__: Any) -> Any:
        raise KeyboardInterrupt  # Ctrl-C while the held-out tasks play, after the groups were played

    monkeypatch.setattr(mtrl.llm.tryout, "play_heldout", interrupt)
    stopped = CliRunner().invoke(app, ["env", "try", MADE_ENV, *SHORT, "--output", str(tmp_path / "stopped")])
    assert stopped.exit_code == 130, stopped.output
    assert "interrupted after 6 of 8 episodes" in stopped.output
    kept = (tmp_path / "stopped" / "partial-rollouts.jsonl").read_text().splitlines()
    assert len(kept) == 6
    assert {json.loads(line)["task"]["answer"] for line in kept} == {"otter", "apple"}
