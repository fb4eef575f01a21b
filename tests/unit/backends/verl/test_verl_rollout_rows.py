"""The environment side of a verl run's health rows, from verl's per-step rollout dumps (``trainer.rollout_data_dir``).

The dump lines here have the shape ``RayPPOTrainer._write_generations`` writes (verl 0.9: ``input``, ``output``,
``gts``, ``score``, ``step`` and every ``reward_extra_info`` field of ``MtrlAgentLoop``, the task index among them);
the contract test (tests/contract/test_verl_agent_loop.py) writes one with verl's own function.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from mtrl.backends.verl import progress as verl_progress
from mtrl.backends.verl import train
from mtrl.backends.verl.bridge import TASK_INDEX
from mtrl.backends.verl.rollout_rows import read_step, step_row
from mtrl.health.signals import parse_signals
from tests.unit.backends.verl.test_verl_train import (  # noqa: F401 - the fixtures
    BUCKET,
    WRITE_CHECKPOINT,
    document,
    s3,
    stand_in_merger,
)


def sample(task: int, score: float, *, prompt: str | None = None, **fields: float) -> str:
    """One dump line of the sample of dataset row ``task`` (its prompt text, by default, names the task too)."""
    entry: dict[str, Any] = {
        "input": f"task {task}" if prompt is None else prompt,
        "output": "crane",
        "gts": None,
        "score": score,
        "step": 1,
        "success": float(score > 0),
        "evaluation": float(score > 0),
        "turns": 3.0,
        "hit_turn_limit": 0.0,
        "truncated": 0.0,
        "error": 0.0,
        "timeout": 0.0,
        "malformed_actions": 0.0,
        TASK_INDEX: float(task),
        **fields,
    }
    return json.dumps(entry)


def test_a_steps_samples_give_the_same_figures_as_every_backends_episodes() -> None:
    lines = [
        sample(0, 1.0),
        sample(0, 0.0, malformed_actions=2.0),
        sample(1, 0.5, turns=6.0, hit_turn_limit=1.0),
        sample(1, 0.5, truncated=1.0),
        sample(2, 0.0, error=1.0, turns=1.0),
        "not json",
    ]
    row = step_row(4, lines)
    assert row.step == 4
    assert row.reward_mean == pytest.approx(2.0 / 4)  # the errored episode has no score of the environment's
    assert row.zero_spread_share == pytest.approx(1 / 2)  # task 1's two scores are equal; task 2 has one
    assert row.malformed_share == pytest.approx(1 / 4)
    assert row.mean_turns == pytest.approx((3 + 3 + 6 + 3 + 1) / 5)
    assert row.cap_hit_share == pytest.approx(1 / 5)
    assert row.error_share == pytest.approx(1 / 5)
    assert row.truncation_share == pytest.approx(1 / 5)
    assert row.evaluation_mean == pytest.approx(3 / 4)


def test_samples_are_grouped_by_task_not_by_their_shared_prompt_text() -> None:
    """Every wordle game opens with the same prompt: grouped by its text, a step's groups merged into one."""
    opening = "Guess the five-letter word. You have 6 guesses."
    lines = [
        sample(0, 1.0, prompt=opening),
        sample(0, 0.0, prompt=opening),  # task 0 separates its rollouts
        sample(1, 0.0, prompt=opening),
        sample(1, 0.0, prompt=opening),  # task 1 does not
    ]
    row = step_row(1, lines)
    assert row.zero_spread_share == pytest.approx(1 / 2)
    assert row.reward_spread_mean == pytest.approx((0.5 + 0.0) / 2)


def test_a_sample_without_a_task_index_adds_no_spread() -> None:
    lines = [json.dumps({"input": "same", "score": score, "turns": 2.0}) for score in (1.0, 0.0)]
    row = step_row(1, lines)
    assert (row.reward_spread_mean, row.zero_spread_share) == (None, None)
    assert row.reward_mean == pytest.approx(0.5)


def test_nan_evaluations_and_hostile_values_do_not_break_a_row() -> None:
    lines = [
        sample(0, 1.0, evaluation=math.nan),
        json.dumps({"input": "t", TASK_INDEX: 0.0, "score": "high", "turns": True, "error": None}),
        json.dumps({"input": "t", TASK_INDEX: "zero", "score": math.inf}),
        json.dumps(["not", "an", "object"]),
    ]
    row = step_row(1, lines)
    assert row.reward_mean is None  # an infinite score makes the mean unknown, not a file no reader can parse
    assert parse_signals(f'{{"planned_steps": 1}}\n{json.dumps(row.to_dict())}\n').rows[0].step == 1
    assert step_row(1, lines[:2]).reward_mean == pytest.approx(0.5)
    assert step_row(1, []).to_dict() == {"step": 1}


def test_rows_are_filled_one_step_late_and_at_the_end(s3: Any, tmp_path: Path) -> None:  # noqa: F811
    dumps = tmp_path / "rollouts"
    dumps.mkdir()
    progress = verl_progress.Progress(s3, f"s3://{BUCKET}/runs/r1/", planned_steps=2, group_size=2, rollout_dir=dumps)
    progress.start()
    (dumps / "1.jsonl").write_text("\n".join([sample(0, 1.0), sample(0, 0.0, malformed_actions=1.0)]) + "\n")
    progress.step(1, {"critic/score/mean": 0.5})
    first = parse_signals(s3.get_object(Bucket=BUCKET, Key="runs/r1/signals.jsonl")["Body"].read().decode())
    assert first.rows[0].malformed_share is None  # its dump may still be being written
    (dumps / "2.jsonl").write_text(sample(1, 1.0) + "\n" + sample(1, 1.0) + "\n")
    progress.step(2, {"critic/score/mean": 1.0})
    second = parse_signals(s3.get_object(Bucket=BUCKET, Key="runs/r1/signals.jsonl")["Body"].read().decode())
    assert second.rows[0].malformed_share == pytest.approx(0.5)
    assert second.rows[0].reward_mean == 0.5  # the trainer's own figure is kept
    assert second.rows[1].zero_spread_share is None
    progress.finish()
    final = parse_signals(s3.get_object(Bucket=BUCKET, Key="runs/r1/signals.jsonl")["Body"].read().decode())
    assert final.rows[1].zero_spread_share == 1.0
    assert read_step(dumps, 3) is None


def test_a_run_asks_verl_for_its_rollouts_and_reads_them(
    s3: Any,  # noqa: F811
    stand_in_merger: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = tmp_path / "run.json"
    config.write_text(json.dumps(document(s3)))
    script = tmp_path / "trainer.py"
    script.write_text(
        "import json, sys, pathlib\n"
        "args = dict(a.split('=', 1) for a in sys.argv[1:] if '=' in a)\n"
        "dumps = pathlib.Path(args['trainer.rollout_data_dir'])\n"
        "dumps.mkdir(parents=True, exist_ok=True)\n"
        "for step in (1, 2, 3):\n"
        f"    (dumps / f'{{step}}.jsonl').write_text({sample(0, 1.0)!r} + '\\n' + {sample(0, 0.0)!r} + '\\n')\n"
        "    print(f'step:{step} - critic/score/mean:0.5', flush=True)\n" + WRITE_CHECKPOINT
    )
    monkeypatch.setenv("MTRL_VERL_TRAINER", f"{sys.executable} {script}")
    monkeypatch.setattr(train, "WORK_DIR", tmp_path / "work")
    assert train.main(["--run-config", str(config)], s3=s3) == 0
    signals = parse_signals(s3.get_object(Bucket=BUCKET, Key="runs/r1/signals.jsonl")["Body"].read().decode())
    assert [row.zero_spread_share for row in signals.rows] == [0.0, 0.0, 0.0]
    assert [row.mean_turns for row in signals.rows] == [3.0, 3.0, 3.0]
