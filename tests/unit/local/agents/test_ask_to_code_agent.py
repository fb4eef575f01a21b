"""The ask_to_code agent: its questions reach the intended requirement, and GRPO teaches it to ask first."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from environments.ask_to_code import TASKS
from environments.ask_to_code.user import best_requirement
from mtrl.envs.registry import load_spec
from mtrl.local.agents import agent_for
from mtrl.local.agents.ask_to_code import FEATURES, AskToCodeEpisode
from mtrl.local.config import TrainConfig
from mtrl.local.trainer import TaskSplit, Trainer, new_state

SAMPLE = load_spec("ask_to_code").path / "sample"


def _rows(name: str) -> list[dict[str, Any]]:
    return [json.loads(line)["metadata"] for line in (SAMPLE / name).read_text().splitlines() if line.strip()]


def test_each_question_is_answered_with_its_own_requirement() -> None:
    agent = agent_for("ask_to_code")
    for task in TASKS:
        episode = agent.start({"info": {"task_id": task.task_id}}, "", np.random.default_rng(0))
        assert isinstance(episode, AskToCodeEpisode)
        for k, question in enumerate(episode.questions):
            assert best_requirement(question, task) is task.requirements[k], (task.task_id, question)


def test_the_coder_needs_every_requirement_and_features_track_the_episode() -> None:
    agent = agent_for("ask_to_code")
    task = TASKS[0]
    episode = agent.start({"info": {"task_id": task.task_id}}, "", np.random.default_rng(0))
    actions, features = episode.options()
    assert features.shape == (len(task.requirements) + 1, len(FEATURES))
    submit = dict(zip(FEATURES, features[-1], strict=True))
    assert submit["submit_without_asking"] == 1.0
    assert task.naive in actions[-1]
    for k, requirement in enumerate(task.requirements):
        episode.observe(episode.questions[k], requirement.answer)
    actions, features = episode.options()
    assert task.solution in actions[-1]
    assert dict(zip(FEATURES, features[0], strict=True))["ask_repeat"] == 1.0
    assert dict(zip(FEATURES, features[-1], strict=True))["submit_informed"] == 1.0


def test_grpo_learns_to_ask_before_coding() -> None:
    config = TrainConfig.from_mapping(
        "ask_to_code", {"steps": 8, "tasks_per_step": 3, "group_size": 4, "learning_rate": 0.5, "eval_every": 8}
    )
    agent = agent_for("ask_to_code")
    trainer = Trainer(load_spec("ask_to_code"), agent, TaskSplit(_rows("train.jsonl"), _rows("eval.jsonl")))
    state = trainer.advance(new_state(config, agent))
    before, after = state.evaluations[0], state.evaluations[-1]
    # Held-out tasks are different functions: what transfers is "ask about every open point, then submit".
    assert before["success_rate"] <= 0.5
    assert after["success_rate"] >= before["success_rate"] + 0.4
    weights = dict(zip(FEATURES, state.policy.theta, strict=True))
    assert weights["submit_without_asking"] < 0
    assert weights["ask_open"] > weights["ask_repeat"]
    # The signal came from asking first and from correctness; the loop penalty almost never varied.
    first = state.history[0]["signal_health"]
    assert first["asked_before_coding"]["zero_spread_share"] < 0.5
    assert first["loop_penalty"]["zero_spread_share"] >= 0.5
