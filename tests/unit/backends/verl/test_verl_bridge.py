"""The per-sample fields the verl agent loop hands verl (``reward_extra_info``) have one key set for every sample.

verl builds a batch's columns from its first sample's keys and reads every other sample with them (verl 0.9,
``AgentLoopWorker`` in agent_loop.py), so an episode that errored, one that timed out, or another environment in the
same batch must not add or drop a key: that would stop training with a KeyError.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from mtrl.backends.verl.bridge import TASK_INDEX, reward_extra_info
from mtrl.contracts.environment import MALFORMED_ACTIONS
from mtrl.envs.registry import list_environments, load_spec
from mtrl.envs.rollout import Rollout, play, scripted

ENVIRONMENTS = [env_id for env_id, _ in list_environments(include_template=True)]


def _played(env_id: str, actions: list[Any] | None = None) -> Rollout:
    spec = load_spec(env_id)
    return play(spec.make(), spec.example_task, scripted(actions or spec.example_actions), spec.rules())


def _failing(messages: Any, *, timeout_s: float | None) -> Any:
    raise RuntimeError("the policy server went away")


@pytest.fixture(scope="module")
def samples() -> dict[str, dict[str, Any]]:
    played = {env_id: reward_extra_info(_played(env_id), truncated=False) for env_id in ENVIRONMENTS}
    spec = load_spec("wordle")
    errored = play(spec.make(), spec.example_task, _failing, spec.rules())
    played["wordle (policy failed)"] = reward_extra_info(errored, truncated=True)
    played["wordle (malformed)"] = reward_extra_info(_played("wordle", ["not a word", "crane"]), truncated=False)
    return played


def test_every_sample_of_every_environment_has_the_same_keys(samples: dict[str, dict[str, Any]]) -> None:
    keys = {name: sorted(info) for name, info in samples.items()}
    first = next(iter(keys.values()))
    assert all(found == first for found in keys.values()), keys


def test_the_fields_are_numbers_verl_can_average(samples: dict[str, dict[str, Any]]) -> None:
    for name, info in samples.items():
        for key, value in info.items():
            assert isinstance(value, float), (name, key, value)


def test_an_errored_episode_says_so_and_counts_its_malformed_actions(samples: dict[str, dict[str, Any]]) -> None:
    assert samples["wordle (policy failed)"]["error"] == 1.0
    assert samples["wordle (policy failed)"]["truncated"] == 1.0
    assert samples["wordle (malformed)"][MALFORMED_ACTIONS] == 1.0
    assert samples["wordle"][MALFORMED_ACTIONS] == 0.0


def test_each_sample_names_its_task_so_a_steps_dump_regroups_by_task() -> None:
    rollout = _played("wordle")
    assert reward_extra_info(rollout, truncated=False, task_index=3)[TASK_INDEX] == 3.0
    assert math.isnan(reward_extra_info(rollout, truncated=False)[TASK_INDEX])  # a row without an index
