"""sop_support's ``load_environment`` (the Nova Forge path) through the verifiers adapter, against the same stand-in
for ``verifiers`` as tests/unit/envs/test_verifiers_adapter.py (the real fork is not installed here)."""

from __future__ import annotations

import asyncio
import types
from typing import Any

import pytest

from environments import sop_support
from mtrl.envs.episode_state import open_states
from tests.unit.envs.test_verifiers_adapter import fake_verifiers

__all__ = ["fake_verifiers"]  # the stand-in fixture


def test_a_reference_rollout_is_scored_by_the_rubric(fake_verifiers: types.ModuleType) -> None:
    env = sop_support.load_environment(dataset=["rows"])
    assert env.kwargs["max_turns"] == 12
    assert env.kwargs["system_prompt"] == sop_support.SYSTEM_PROMPT
    state: dict[str, Any] = {"prompt": "", "info": {"ticket_id": "T001"}}
    assert asyncio.run(env.is_completed([], state)) is False
    for action in sop_support.solve("T001").actions:
        reply, state = asyncio.run(env.env_response([{"role": "assistant", "content": action}], state))
    assert reply[0]["content"] == "Answer recorded. The ticket is closed."
    assert asyncio.run(env.is_completed([], state)) is True
    rubric = env.kwargs["rubric"]
    assert [func.__name__ for func in rubric.funcs] == ["aggregate", *sop_support.WEIGHTS]
    assert rubric.weights == [1.0, 0.0, 0.0, 0.0, 0.0]
    scores = {func.__name__: func(state=state) for func in rubric.funcs}
    assert scores == {"aggregate": 1.0, "fields": 1.0, "state": 1.0, "procedure": 1.0, "excess_calls": 0.0}


def test_an_unknown_ticket_ends_the_rollout_at_once(fake_verifiers: types.ModuleType) -> None:
    env = sop_support.load_environment()
    state: dict[str, Any] = {"prompt": "", "info": {"ticket_id": "T999"}}
    reply, state = asyncio.run(env.env_response([{"role": "assistant", "content": "hi"}], state))
    assert "is not a sop_support ticket" in reply[0]["content"]
    assert asyncio.run(env.is_completed([], state)) is True


@pytest.mark.parametrize("ticket_id", ["T002", "T010"])
def test_the_sandbox_is_freed_once_the_rollout_is_scored(fake_verifiers: types.ModuleType, ticket_id: str) -> None:
    before = len(open_states())
    env = sop_support.load_environment()
    state: dict[str, Any] = {"prompt": "", "info": {"ticket_id": ticket_id}}
    for action in sop_support.solve(ticket_id).actions:
        _, state = asyncio.run(env.env_response([{"role": "assistant", "content": action}], state))
    assert asyncio.run(env.is_completed([], state)) is True
    assert env.kwargs["rubric"].funcs[0](state=state) == 1.0
    assert len(open_states()) == before
