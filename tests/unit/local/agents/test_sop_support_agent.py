"""The sop_support agent: its candidates follow what was observed, and GRPO teaches it the procedure."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from environments.sop_support import solve, tickets
from mtrl.contracts.environment import close_environment
from mtrl.envs.registry import load_spec
from mtrl.local.agents import agent_for
from mtrl.local.agents.sop_support import FEATURES, SopSupportEpisode, possible_codes
from mtrl.local.config import TrainConfig
from mtrl.local.policy import LogLinearPolicy
from mtrl.local.trainer import TaskSplit, Trainer, new_state

SPEC = load_spec("sop_support")


def _rows(name: str) -> list[dict[str, Any]]:
    return [json.loads(line)["metadata"] for line in (SPEC.path / "sample" / name).read_text().splitlines()]


def _features(episode: SopSupportEpisode, action: str) -> dict[str, float]:
    actions, features = episode.options()
    return dict(zip(FEATURES, features[list(actions).index(action)], strict=True))


def test_the_reference_episode_is_among_the_candidates_and_its_features_track_the_facts() -> None:
    agent = agent_for("sop_support")
    for ticket_id in tickets():
        env = SPEC.make()
        episode = agent.start(
            {"info": {"ticket_id": ticket_id}},
            env.reset({"prompt": "", "info": {"ticket_id": ticket_id}}),
            np.random.default_rng(0),
        )
        assert isinstance(episode, SopSupportEpisode)
        for action in solve(ticket_id).actions:
            actions, features = episode.options()
            assert features.shape == (len(actions), len(FEATURES))
            assert action in actions, (ticket_id, action)
            row = _features(episode, action)
            # Each step of the procedure is the next lookup, the determined act or the determined answer.
            assert row["lookup_next"] + row["act_determined"] + row["answer_determined"] == 1.0, (ticket_id, row)
            episode.observe(action, env.step(action).observation)
        assert possible_codes(episode.facts, episode.ticket) == {solve(ticket_id).branch}
        close_environment(env)


def test_nothing_is_determined_before_the_lookups() -> None:
    agent = agent_for("sop_support")
    episode = agent.start({"info": {"ticket_id": "T001"}}, "", np.random.default_rng(0))
    _, features = episode.options()
    table = [dict(zip(FEATURES, row, strict=True)) for row in features]
    assert not any(row["answer_determined"] or row["act_determined"] for row in table)
    assert sum(row["lookup_next"] for row in table) == 1.0  # lookup_customer: the SOP's first step
    with pytest.raises(ValueError, match="unknown sop_support ticket"):
        agent.start({"info": {"ticket_id": "T999"}}, "", np.random.default_rng(0))


def test_grpo_learns_the_procedure_and_the_held_out_evaluation_improves() -> None:
    config = TrainConfig.from_mapping(
        "sop_support", {"steps": 10, "tasks_per_step": 4, "group_size": 6, "learning_rate": 0.5, "eval_every": 5}
    )
    agent = agent_for("sop_support")
    trainer = Trainer(SPEC, agent, TaskSplit(_rows("train.jsonl"), _rows("eval.jsonl")))
    state = trainer.advance(new_state(config, agent))
    before, after = state.evaluations[0], state.evaluations[-1]
    # Held-out tickets are other customers and orders: what transfers is "look up in order, act, then answer".
    assert before["tasks"] == 18
    assert before["success_rate"] <= 0.2
    assert after["success_rate"] >= 0.8
    assert after["reward_mean"] > before["reward_mean"] + 0.3
    weights = dict(zip(FEATURES, state.policy.theta, strict=True))
    assert weights["answer_determined"] > weights["answer_possible"]
    assert weights["lookup_next"] > weights["lookup_repeat"]


def test_the_untrained_policy_mostly_answers_too_early() -> None:
    agent = agent_for("sop_support")
    trainer = Trainer(SPEC, agent, TaskSplit(_rows("train.jsonl"), _rows("eval.jsonl")))
    policy = LogLinearPolicy(FEATURES)
    rng = np.random.default_rng(3)
    results = [trainer.rollout(policy, task, rng).result for task in _rows("train.jsonl")]
    assert sum(r.evaluation or 0.0 for r in results) / len(results) < 0.2
    assert len({round(r.reward, 3) for r in results}) > 5  # the partial reward still tells rollouts apart
