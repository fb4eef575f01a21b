"""``EpisodeResult.metrics["malformed_actions"]``: every built-in environment (and the template) counts the actions it
could not parse or use, per episode, and the training-health row's ``malformed_share`` is the share of episodes with
any (``mtrl.health.episodes.episode_fields``).

Each environment is played by the one episode driver (the real environment, real ``step`` calls) with a scripted
policy that sends malformed actions, and once with its own example episode (a clean one, which must count 0).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from mtrl.contracts.environment import MALFORMED_ACTIONS
from mtrl.envs.registry import list_environments, load_spec
from mtrl.envs.rollout import Policy, Rollout, StopEpisode, play
from mtrl.health.episodes import episode_fields

SOP_TICKET = {"prompt": "ticket", "info": {"ticket_id": "T001"}}
ASK_TASK = {"prompt": "Write slugify", "info": {"task_id": "slugify"}}

# env id → (task, scripted actions, how many of them are malformed)
MALFORMED_EPISODES: dict[str, tuple[dict[str, object], list[str], int]] = {
    # "12345" does not parse as a guess; "zzzzz" parses but is not a word: neither is a usable guess.
    "wordle": ({"prompt": "Guess", "answer": "beach"}, ["12345", "zzzzz", "raise", "beach"], 2),
    # Neither a question nor code, twice; then a question (well formed, not a submission).
    "ask_to_code": (ASK_TASK, ["hello there", "ok.", "What should happen to spaces?"], 2),
    # No tool call and no answer; a tool call whose body is not JSON; a final answer that is not one JSON object.
    "sop_support": (
        SOP_TICKET,
        ["I will look into it", "<tool_call>{not json</tool_call>", "<final_output>refund it</final_output>"],
        3,
    ),
    # An empty reply and a reply of several words; then the right word.
    "template": ({"prompt": "Say the word.", "answer": "otter"}, ["   ", "is it otter", "otter"], 2),
}


def scripted(actions: Sequence[str]) -> Policy:
    replies = iter(actions)

    def policy(messages: list[dict[str, str]], *, timeout_s: float | None) -> str:
        for reply in replies:
            return reply
        raise StopEpisode  # the script ran out: the episode ends as it stands

    return policy


def played(env_id: str, task: dict[str, object], actions: Sequence[str]) -> Rollout:
    spec = load_spec(env_id)
    rollout = play(spec.make(), task, scripted(actions), spec.rules(timeout_s=60.0))
    assert rollout.error is None, rollout.error_text
    assert rollout.turns == len(actions)
    return rollout


def test_every_registered_environment_is_covered() -> None:
    assert {env_id for env_id, _ in list_environments(include_template=True)} <= set(MALFORMED_EPISODES)


@pytest.mark.parametrize("env_id", sorted(MALFORMED_EPISODES))
def test_malformed_actions_are_counted_per_episode(env_id: str) -> None:
    task, actions, expected = MALFORMED_EPISODES[env_id]
    rollout = played(env_id, task, actions)
    assert rollout.result is not None
    assert rollout.result.metrics[MALFORMED_ACTIONS] == expected


@pytest.mark.parametrize("env_id", sorted(MALFORMED_EPISODES))
def test_the_example_episode_counts_none_and_the_share_is_per_episode(env_id: str) -> None:
    spec = load_spec(env_id)
    clean = played(env_id, spec.example_task, spec.example_actions)
    assert clean.result is not None
    assert clean.result.metrics[MALFORMED_ACTIONS] == 0.0
    task, actions, _ = MALFORMED_EPISODES[env_id]
    bad = played(env_id, task, actions)
    # One episode of two had malformed actions: the share counts episodes, not actions.
    assert episode_fields([[bad, clean]])["malformed_share"] == 0.5
    assert episode_fields([[clean]])["malformed_share"] == 0.0


def test_a_well_formed_call_the_desk_refuses_is_not_malformed() -> None:
    call = '<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>'
    rollout = played("sop_support", SOP_TICKET, [call])
    assert rollout.result is not None
    assert rollout.result.metrics["refused_calls"] == 1.0
    assert rollout.result.metrics[MALFORMED_ACTIONS] == 0.0


def test_a_non_text_action_counts_as_malformed_in_the_template() -> None:
    env = load_spec("template").make()
    env.reset({"prompt": "Say the word.", "answer": "otter"})
    env.step(None)  # type: ignore[arg-type]  # a policy that returned nothing usable
    assert env.result().metrics[MALFORMED_ACTIONS] == 1.0
