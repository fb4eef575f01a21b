"""Toy environments for the sessions loop tests, written to the environment contract (``mtrl.contracts.environment``)
and wrapped as ``EnvironmentSpec``s the loop plays through the one episode driver."""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mtrl.contracts.environment import MALFORMED_ACTIONS, EpisodeResult, StepResult
from mtrl.envs.registry import EnvironmentSpec
from mtrl.llm.tiny import _WORDS

# Half of the tiny vocabulary's words: a random model starts near 40% and the adapter can learn to prefer them.
GOOD_WORDS = frozenset(_WORDS.split()[::2])


class FirstWordEnv:
    """One turn: reward 1 when the reply's first word is one of ``GOOD_WORDS``."""

    def __init__(self) -> None:
        self._reply: str | None = None

    def reset(self, task: Mapping[str, Any]) -> str:
        return str(task["prompt"])

    def step(self, action: str) -> StepResult:
        self._reply = action
        return StepResult("noted", True)

    @property
    def done(self) -> bool:
        return self._reply is not None

    def result(self) -> EpisodeResult:
        words = (self._reply or "").split()
        good = 1.0 if words and words[0] in GOOD_WORDS else 0.0
        return EpisodeResult(
            reward=good,
            components={"good_first_word": good},
            metrics={MALFORMED_ACTIONS: 0.0 if words else 1.0},
            success=good == 1.0,
        )


class ChatterEnv:
    """Several turns, each observation naming the turn; reward: the share of turns with a non-empty reply. With
    ``crash_on`` the step of that turn raises what the factory gives (an infrastructure failure in the tests)."""

    def __init__(self, crash: BaseException | None = None) -> None:
        self._turn = 0
        self._replies: list[str] = []
        self._crash = crash

    def reset(self, task: Mapping[str, Any]) -> str:
        return str(task["prompt"])

    def step(self, action: str) -> StepResult:
        if self._crash is not None:
            raise self._crash
        self._replies.append(action)
        self._turn += 1
        return StepResult(f"turn {self._turn} over , say again", False)

    @property
    def done(self) -> bool:
        return False

    def result(self) -> EpisodeResult:
        answered = sum(1 for reply in self._replies if reply.strip())
        return EpisodeResult(reward=answered / max(1, len(self._replies)), metrics={MALFORMED_ACTIONS: 0.0})


def spec_for(
    env_id: str, make_env: Callable[..., Any], *, max_turns: int, system_prompt: str = "reply with one word"
) -> EnvironmentSpec:
    module = types.ModuleType(env_id)
    module.ENV_ID = env_id  # type: ignore[attr-defined]
    module.DESCRIPTION = f"{env_id} (a sessions loop test toy)"  # type: ignore[attr-defined]
    module.make_env = make_env  # type: ignore[attr-defined]
    module.validate_task = lambda metadata: []  # type: ignore[attr-defined]
    module.EXAMPLE_TASK = {"prompt": "say a word"}  # type: ignore[attr-defined]
    module.EXAMPLE_ACTIONS = ["apple"]  # type: ignore[attr-defined]
    module.MAX_TURNS = max_turns  # type: ignore[attr-defined]
    module.SYSTEM_PROMPT = system_prompt  # type: ignore[attr-defined]
    return EnvironmentSpec(env_id=env_id, source="custom", path=Path("."), module=module)


def first_word_spec() -> EnvironmentSpec:
    return spec_for("first_word", FirstWordEnv, max_turns=1)


def chatter_spec(max_turns: int = 3, *, crash_every: int = 0, crash: BaseException | None = None) -> EnvironmentSpec:
    """``crash_every``: every n-th environment made raises ``crash`` at its first step."""
    made = [0]

    def make_env(**_: Any) -> ChatterEnv:
        made[0] += 1
        failing = crash_every and made[0] % crash_every == 0
        return ChatterEnv(crash if failing else None)

    return spec_for("chatter", make_env, max_turns=max_turns)
