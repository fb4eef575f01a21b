"""The demo's three held-out rows: untrained, the hand-set heuristic, trained — on the same words."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from mtrl.cli.demo.plan import EVAL_KEY, plan_for
from mtrl.cli.demo.tables import HAND_SET_WEIGHTS, evaluation_table, heuristic_evaluation, summary_tables
from mtrl.local.config import TrainConfig


def _holdout(limit: int) -> list[dict[str, object]]:
    rows = [json.loads(line)["metadata"] for line in plan_for().eval_path.read_text().splitlines() if line.strip()]
    return rows[:limit]


def test_the_hand_set_heuristic_is_evaluated_like_the_run() -> None:
    config = TrainConfig.from_mapping("wordle", {"steps": 20, "seed": 7, "eval_tasks": 12})
    training = {"config": config.to_dict()}
    first = heuristic_evaluation(training, _holdout(12))
    again = heuristic_evaluation(training, _holdout(12))
    assert first == again  # seeded exactly as the run's evaluations, so the rows are comparable
    assert first["tasks"] == 12
    # One weight by hand, no training: it already solves most held-out words (what the demo must say plainly).
    assert first["success_rate"] >= 0.75
    assert HAND_SET_WEIGHTS == {"consistent": 1.0}


def test_the_table_has_three_rows_on_the_same_words() -> None:
    training = {
        "steps": 20,
        "heldout": {
            "tasks": 50,
            "success_before": 0.2,
            "success_after": 1.0,
            "reward_before": -0.1,
            "reward_after": 1.4,
        },
        "heuristic": {"success_rate": 0.96, "reward_mean": 1.3},
    }
    console = Console(record=True, width=160, force_terminal=False)
    console.print(evaluation_table(training))
    text = console.export_text()
    assert "the sample's eval.jsonl, 50 words" in text
    lines = [line for line in text.splitlines() if "%" in line]
    assert [line.split("│")[2].strip() for line in lines] == ["20%", "96%", "100%"]
    assert "hand-set heuristic (consistent = 1, no training)" in text
    assert "trained (20 GRPO steps)" in text


def test_signal_health_uses_the_one_verdict_rule() -> None:
    training = {
        "steps": 20,
        "heldout": {"tasks": 50},
        "signal_health_first_step": {
            "reward": {"mean_spread": 0.5, "zero_spread_share": 0.1},
            "outcome": {"mean_spread": 0.0, "zero_spread_share": 0.95},
        },
        "signal_health": {"reward": {"zero_spread_share": 0.0}, "outcome": {"zero_spread_share": 1.0}},
    }
    console = Console(record=True, width=200, force_terminal=False)
    for table in summary_tables({"run_id": "r"}, training):
        console.print(table)
    lines = {line.split("│")[1].strip(): line for line in console.export_text().splitlines() if line.count("│") > 4}
    assert lines["outcome"].rstrip(" │").endswith("flat")
    assert lines["reward"].rstrip(" │").endswith("signal")


def test_demo_refuses_bad_choices_before_anything_starts(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from mtrl.cli import app

    work = tmp_path / "demo"
    for args, expected in (
        (["--env", "nope"], "no environment 'nope'"),
        (["--env", "template", "--policy", "features"], "use a language-model policy"),
        (["--env", "wordle", "-H", "policy=gpt"], "policy is 'features' or 'hf:MODEL'"),
        (["--env", "wordle", "-H", "steps"], "--hyperparameter needs KEY=VALUE"),
        (["--env", "wordle", "-H", "lora_rank=8"], "unknown local backend setting"),
    ):
        result = CliRunner().invoke(app, ["demo", *args, "--work-dir", str(work)])
        assert result.exit_code == 2, (args, result.output)
        assert expected in result.output, (args, result.output)
    assert not work.exists()  # refused before the synth, the emulator or any run


def test_plain_demo_plan_is_the_wordle_features_run_it_always_was() -> None:
    plan = plan_for()
    assert plan.manifest == {
        "backend": "local",
        "environment": "wordle",
        "hyperparameters": {"steps": 20, "seed": 7},
        "eval_dataset": EVAL_KEY,
    }
    assert plan.policy == "features"
    assert plan.hand_set_heuristic
    assert "not a language model" in plan.policy_line
