"""Why sop_support's reward is dense (AWS's MTRL best practices): on recorded rollouts of an untrained policy, the
binary evaluation gives GRPO no signal in more groups than the partial-credit reward does.

The recording (``data/sop_support_untrained_rollouts.jsonl``) is GROUP_SIZE rollouts of each of the first TASKS
training tickets by the local backend's sop_support agent with all weights 0 (uniform over its candidates: the
policy a run starts from), seeded. Regenerate it with
``python -m tests.unit.environments.sop_support.test_sop_support_densify``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from mtrl.contracts.environment import closing
from mtrl.envs.registry import load_spec
from mtrl.envs.scoring import STARVED_SHARE, densify_verdict, zero_spread_share
from mtrl.local.agents import agent_for
from mtrl.local.policy import LogLinearPolicy

RECORDING = Path(__file__).resolve().parent / "data" / "sop_support_untrained_rollouts.jsonl"
SPEC = load_spec("sop_support")
TASKS = 24
GROUP_SIZE = 8
SEED = 2026


def _train_tasks() -> list[dict[str, Any]]:
    lines = (SPEC.path / "sample" / "train.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["metadata"] for line in lines[:TASKS]]


def record() -> str:
    """The recording's text: one JSON line per rollout (ticket, group, actions, reward, evaluation)."""
    agent = agent_for("sop_support")
    policy = LogLinearPolicy(agent.feature_names)  # all weights 0: uniform over the candidates
    rng = np.random.default_rng(SEED)
    lines = []
    for group, task in enumerate(_train_tasks()):
        for _ in range(GROUP_SIZE):
            with closing(SPEC.make()) as env:
                episode = agent.start(task, env.reset(task), rng)
                actions: list[str] = []
                while not env.done and len(actions) < agent.max_turns:
                    options, features = episode.options()
                    action = options[policy.decide(features, rng).index]
                    episode.observe(action, env.step(action).observation)
                    actions.append(action)
                result = env.result()
            row = {
                "ticket_id": task["info"]["ticket_id"],
                "group": group,
                "actions": actions,
                "reward": round(result.reward, 6),
                "evaluation": result.evaluation,
            }
            lines.append(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")
    return "".join(lines)


def _recorded() -> list[dict[str, Any]]:
    return [json.loads(line) for line in RECORDING.read_text(encoding="utf-8").splitlines()]


def _groups(rows: list[dict[str, Any]], key: str) -> list[list[float]]:
    groups: dict[int, list[float]] = {}
    for row in rows:
        groups.setdefault(row["group"], []).append(float(row[key]))
    return list(groups.values())


def test_the_recording_is_current_and_its_scores_replay_exactly() -> None:
    assert RECORDING.read_text(encoding="utf-8") == record(), (
        "stale: python -m tests.unit.environments.sop_support.test_sop_support_densify"
    )
    for row in _recorded():
        _, result = SPEC.play({"prompt": "", "info": {"ticket_id": row["ticket_id"]}}, row["actions"])
        assert (round(result.reward, 6), result.evaluation) == (row["reward"], row["evaluation"])


def test_the_binary_evaluation_starves_grpo_where_the_partial_reward_does_not() -> None:
    rows = _recorded()
    assert len(rows) == TASKS * GROUP_SIZE
    binary, partial = _groups(rows, "evaluation"), _groups(rows, "reward")
    binary_share, partial_share = zero_spread_share(binary), zero_spread_share(partial)
    verdict = densify_verdict(binary, partial)
    print(f"zero-spread share: evaluation {binary_share:.2f}, reward {partial_share:.2f} — {verdict.reason}")
    assert binary_share > partial_share
    assert (verdict.binary_share, verdict.partial_share) == (binary_share, partial_share)
    assert binary_share >= STARVED_SHARE  # most groups: every rollout scores the same 0/1, GRPO learns nothing
    assert verdict.densify, verdict.reason  # the rule docs/extending.md states, applied to this environment
    # The evaluation is not constant either: the untrained policy does solve a ticket now and then.
    assert 0 < sum(row["evaluation"] for row in rows) < len(rows)


if __name__ == "__main__":
    RECORDING.parent.mkdir(exist_ok=True)
    RECORDING.write_text(record(), encoding="utf-8")
    print(f"{RECORDING}: {TASKS * GROUP_SIZE} rollouts")
    sys.exit(0)
