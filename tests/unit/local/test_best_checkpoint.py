"""The local trainer keeps the policy of its best held-out evaluation during training (step >= 1), so a run stopped
early by ``early_stop`` keeps it next to the latest state; it survives the state's save and load."""

from __future__ import annotations

import math
from typing import Any

from mtrl.envs.registry import load_spec
from mtrl.local.agents import agent_for
from mtrl.local.config import TrainConfig
from mtrl.local.trainer import TaskSplit, Trainer, TrainingState, new_state
from tests.unit.local.conftest import FAST_ENV_ARGS, SMALL

Rows = tuple[list[dict[str, Any]], list[dict[str, Any]]]


def _state() -> TrainingState:
    return new_state(TrainConfig.from_mapping("wordle", dict(SMALL), env_args=FAST_ENV_ARGS), agent_for("wordle"))


def test_only_a_better_evaluation_after_step_zero_replaces_the_best() -> None:
    state = _state()
    state.keep_if_best({"evaluation_mean": 0.9})  # step 0: the untrained policy is no training checkpoint
    assert state.best is None
    state.step = 2
    state.keep_if_best({"evaluation_mean": 0.25})
    state.step = 4
    state.keep_if_best({"evaluation_mean": math.nan})  # not measured: ignored
    state.keep_if_best({"evaluation_mean": 0.25})  # a tie keeps the earlier checkpoint
    assert state.best is not None
    assert (state.best["step"], state.best["evaluation_mean"]) == (2, 0.25)
    state.policy.theta[0] += 1.0  # training moved on: the kept policy must not follow
    assert state.best["policy"] != state.policy.to_dict()
    state.step = 6
    state.keep_if_best({"evaluation_mean": 0.5})
    assert (state.best["step"], state.best["policy"]) == (6, state.policy.to_dict())
    assert TrainingState.from_dict(state.to_dict()).best == state.best


def test_a_state_saved_without_a_best_checkpoint_still_loads() -> None:
    document = _state().to_dict()
    del document["best"]
    assert TrainingState.from_dict(document).best is None


def test_training_keeps_the_best_of_its_evaluations(wordle_rows: Rows) -> None:
    agent = agent_for("wordle")
    trainer = Trainer(load_spec("wordle"), agent, TaskSplit(wordle_rows[0], wordle_rows[1]), env_args=FAST_ENV_ARGS)
    state = trainer.advance(_state())
    during = [e for e in state.evaluations if e["step"] >= 1]
    assert during
    assert state.best is not None
    best = max(during, key=lambda e: e["evaluation_mean"])
    assert state.best["evaluation_mean"] == best["evaluation_mean"]
    assert state.best["step"] == min(e["step"] for e in during if e["evaluation_mean"] == best["evaluation_mean"])
