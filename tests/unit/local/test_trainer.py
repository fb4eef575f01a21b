"""The GRPO trainer learns, is reproducible, and resumes exactly from its persisted state."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from mtrl.contracts.environment import EpisodeResult, StepResult
from mtrl.envs.registry import EnvironmentSpec, load_spec
from mtrl.local.agents import NoAgentError, agent_for
from mtrl.local.config import ConfigError, TrainConfig
from mtrl.local.policy import Adam, LogLinearPolicy
from mtrl.local.run import DirectoryStore, advance_run, create_run, load_run, read_summary
from mtrl.local.trainer import TaskSplit, Trainer, TrainingState, new_state
from tests.unit.local.conftest import FAST_ENV_ARGS, SMALL

Rows = tuple[list[dict[str, Any]], list[dict[str, Any]]]


def _config(**overrides: Any) -> TrainConfig:
    return TrainConfig.from_mapping("wordle", {**SMALL, **overrides}, env_args=FAST_ENV_ARGS)


def _train(rows: Rows, config: TrainConfig) -> TrainingState:
    agent = agent_for("wordle")
    trainer = Trainer(load_spec("wordle"), agent, TaskSplit(rows[0], rows[1]), env_args=config.env_args)
    return trainer.advance(new_state(config, agent))


def test_training_beats_the_untrained_policy_on_held_out_words(wordle_rows: Rows) -> None:
    state = _train(wordle_rows, _config())
    before, after = state.evaluations[0], state.evaluations[-1]
    assert state.done
    assert state.step == 5
    assert before["step"] == 0
    assert after["step"] == 5
    assert after["tasks"] == 30
    # Untrained it mostly guesses probes; a few steps of GRPO teach it to play consistent, informative words.
    assert before["success_rate"] < 0.4
    assert after["success_rate"] >= before["success_rate"] + 0.4
    assert after["reward_mean"] > before["reward_mean"]
    weights = dict(zip(state.policy.feature_names, state.policy.theta, strict=True))
    assert weights["consistent"] > 0
    for record in state.history:
        assert set(record) >= {"reward_mean", "success_rate", "components", "signal_health", "informative_groups"}
        assert set(record["components"]) == {"outcome", "shaping"}
        assert set(record["signal_health"]) == {"reward", "outcome", "shaping"}


def test_same_seed_same_run_and_another_seed_differs(wordle_rows: Rows) -> None:
    config = _config(steps=2, tasks_per_step=2, eval_tasks=5)
    first, second = _train(wordle_rows, config), _train(wordle_rows, config)
    assert first.policy.theta.tolist() == second.policy.theta.tolist()
    assert [r["reward_mean"] for r in first.history] == [r["reward_mean"] for r in second.history]
    other = _train(wordle_rows, _config(steps=2, tasks_per_step=2, eval_tasks=5, seed=1))
    assert other.policy.theta.tolist() != first.policy.theta.tolist()


def test_chunked_run_through_a_store_equals_one_pass(tmp_path: Path, wordle_rows: Rows) -> None:
    config = _config(steps=3, tasks_per_step=2, group_size=4, eval_every=2, eval_tasks=5)
    one_pass = DirectoryStore(tmp_path / "one")
    create_run(one_pass, config, *wordle_rows)
    advance_run(one_pass)
    chunked = DirectoryStore(tmp_path / "chunked")
    create_run(chunked, config, *wordle_rows)
    calls = 0
    while not load_run(chunked).state.done:
        advance_run(chunked, max_steps=1)  # what a status poll with a tiny time slice does
        calls += 1
    assert calls >= 3
    a, b = load_run(one_pass).state, load_run(chunked).state
    assert a.policy.theta.tolist() == b.policy.theta.tolist()
    assert [e["success_rate"] for e in a.evaluations] == [e["success_rate"] for e in b.evaluations]
    assert [e["step"] for e in b.evaluations] == [0, 2, 3]
    summary = read_summary(chunked)
    assert summary is not None
    assert summary["status"] == "completed"
    assert summary["heldout"]["success_before"] == b.evaluations[0]["success_rate"]
    assert (tmp_path / "chunked" / "training.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "chunked" / "summary.json").read_text())["plot"].endswith("training.png")


def test_holdout_is_split_from_training_rows_when_there_is_no_eval_set(wordle_rows: Rows) -> None:
    train = wordle_rows[0][:50]
    split = TaskSplit.from_rows(train, None, holdout_fraction=0.2, seed=3)
    assert len(split.holdout) == 10
    assert len(split.train) == 40
    answers = {row["answer"] for row in split.train}
    assert not answers & {row["answer"] for row in split.holdout}
    assert split == TaskSplit.from_rows(train, None, holdout_fraction=0.2, seed=3)


class _ConstantEnv:
    """Every episode scores the same, whatever the policy does: a reward with no signal."""

    def __init__(self) -> None:
        self._done = False

    def reset(self, task: Mapping[str, Any]) -> str:
        return "pick one"

    def step(self, action: str) -> StepResult:
        self._done = True
        return StepResult("ok", True)

    @property
    def done(self) -> bool:
        return self._done

    def result(self) -> EpisodeResult:
        return EpisodeResult(reward=1.0, components={"flat": 0.5}, success=True)


class _TwoChoices:
    env_id = "constant"
    feature_names = ("a", "b")
    max_turns = 3

    def start(self, task: Mapping[str, Any], observation: str, rng: np.random.Generator) -> Any:
        class _Episode:
            def options(self) -> tuple[list[str], np.ndarray]:
                return ["x", "y"], np.array([[1.0, 0.0], [0.0, 1.0]])

            def observe(self, action: str, observation: str) -> None:
                return None

        return _Episode()


def test_groups_without_spread_teach_nothing_and_are_flagged() -> None:
    module = SimpleNamespace(make_env=_ConstantEnv)
    spec = EnvironmentSpec(env_id="constant", source="custom", path=Path(), module=module)  # type: ignore[arg-type]
    agent = _TwoChoices()
    tasks = [{"prompt": str(i)} for i in range(6)]
    config = TrainConfig(env_id="constant", steps=2, tasks_per_step=3, group_size=4, eval_tasks=2)
    state = Trainer(spec, agent, TaskSplit(tasks[:4], tasks[4:])).advance(new_state(config, agent))
    assert state.policy.theta.tolist() == [0.0, 0.0]  # zero advantages everywhere: no update
    record = state.history[-1]
    assert record["informative_groups"] == 0
    assert record["signal_health"]["reward"]["zero_spread_share"] == 1.0
    assert record["signal_health"]["flat"] == {"mean_spread": 0.0, "zero_spread_share": 1.0, "mean": 0.5}
    assert any("'flat' is constant" in warning for warning in record["signal_warnings"])


def test_policy_gradient_is_the_score_function() -> None:
    policy = LogLinearPolicy(("x", "y"), np.array([0.5, -1.0]))
    features = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    decision = policy.decide(features, np.random.default_rng(0))
    eps = 1e-6
    numeric = []
    for k in range(2):
        bumped = policy.theta.copy()
        bumped[k] += eps
        up = np.log(LogLinearPolicy(("x", "y"), bumped).probabilities(features)[decision.index])
        down = np.log(policy.probabilities(features)[decision.index])
        numeric.append((up - down) / eps)
    assert np.allclose(decision.grad_log_prob, numeric, atol=1e-4)
    adam = Adam(learning_rate=0.1)
    assert adam.ascend(np.zeros(2), np.array([1.0, -1.0])).tolist() == pytest.approx([0.1, -0.1])


def test_bad_settings_are_named() -> None:
    with pytest.raises(ConfigError, match=r"unknown local backend setting.*lora_rank"):
        TrainConfig.from_mapping("wordle", {"lora_rank": 8})
    with pytest.raises(ConfigError, match="group_size"):
        TrainConfig.from_mapping("wordle", {"group_size": 1})
    with pytest.raises(ConfigError, match="'steps' must be a int"):
        TrainConfig.from_mapping("wordle", {"steps": "many"})
    with pytest.raises(ConfigError, match="policy is 'features' or 'hf:MODEL'"):
        TrainConfig.from_mapping("wordle", {"policy": "gpt"})
    with pytest.raises(ConfigError, match="'policy' must be a str"):
        TrainConfig.from_mapping("wordle", {"policy": 3})
    # The old advice ("use the hyperpod or serverless backend") was wrong: the language-model policy plays any env.
    with pytest.raises(NoAgentError, match="not for 'chess': use a language-model policy") as raised:
        agent_for("chess")
    assert "hyperpod" not in str(raised.value)


def test_the_default_policy_is_features_for_the_built_ins_and_the_language_model_otherwise() -> None:
    assert TrainConfig.from_mapping("wordle", {}).policy == "features"
    assert TrainConfig.from_mapping("sop_support", {}).steps == 20  # the features defaults stay as they were
    custom = TrainConfig.from_mapping("my_env", {})
    assert (custom.policy, custom.uses_language_model) == ("hf:tiny-random", True)
    assert (custom.steps, custom.group_size, custom.learning_rate) == (2, 2, 5e-4)  # a plumbing-sized LM run
    chosen = TrainConfig.from_mapping("wordle", {"policy": "hf:/models/qwen", "steps": 3})
    assert (chosen.policy, chosen.steps, chosen.learning_rate) == ("hf:/models/qwen", 3, 5e-4)
