"""A sandboxed step ends with its episode (issue 38 item 7): a program that never finishes, run from an environment's
``step`` two seconds before the episode's deadline, is stopped at the deadline, not at its own ``Limits.timeout_s``
(10 s here) — through the one episode driver's synchronous face and its awaited one (the verl agent loop), with
``run_cases`` (the rewards' call) and ``run_code``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import pytest

from mtrl.contracts.deadline import episode_deadline
from mtrl.contracts.environment import EpisodeResult, StepResult
from mtrl.envs.registry import load_spec
from mtrl.envs.rollout import EpisodeRules, play, play_async, scripted
from mtrl.sandbox import Case, Check, Limits, SandboxResult, SandboxUnavailableError, run_cases, run_code

FOREVER = "while True:\n    pass\n"
EPISODE_S = 2.0
OWN_TIMEOUT_S = 10.0
MARGIN_S = 2.5  # process start and teardown around the deadline; far below OWN_TIMEOUT_S


class RunsCode:
    """Each action is a program run in the sandbox by ``step``; the result records what the sandbox said."""

    def __init__(self, runner: str, isolation: str) -> None:
        self.runner, self.limits = runner, Limits(timeout_s=OWN_TIMEOUT_S, isolation=isolation)  # type: ignore[arg-type]
        self.results: list[SandboxResult] = []
        self._done = False

    def reset(self, task: Mapping[str, Any]) -> str:
        return "send a program"

    def step(self, action: str) -> StepResult:
        if self.runner == "run_cases":
            result = run_cases(action, [Case("c", (Check("f", (), 1),))], self.limits)
        else:
            result = run_code(action, limits=self.limits)
        self.results.append(result)
        self._done = True
        return StepResult(result.status, True)

    @property
    def done(self) -> bool:
        return self._done

    def result(self) -> EpisodeResult:
        return EpisodeResult(reward=0.0, components={"ran": 0.0})


@pytest.mark.parametrize("runner", ["run_cases", "run_code"])
@pytest.mark.parametrize("face", ["play", "play_async"])
@pytest.mark.parametrize("isolation", ["auto", "lambda"])
def test_a_sandboxed_step_stops_at_the_episodes_deadline(runner: str, face: str, isolation: str) -> None:
    env = RunsCode(runner, isolation)
    rules = EpisodeRules(max_turns=1, timeout_s=EPISODE_S)
    started = time.monotonic()

    async def policy(request: Any) -> str:
        return FOREVER

    try:
        if face == "play":
            rollout = play(env, {}, scripted([FOREVER]), rules)
        else:
            rollout = asyncio.run(play_async(env, {}, policy, rules))
    except SandboxUnavailableError as error:  # pragma: no cover - depends on the kernel
        pytest.skip(str(error))
    if rollout.error is not None and isinstance(rollout.error, SandboxUnavailableError):
        pytest.skip(str(rollout.error))
    elapsed = time.monotonic() - started
    assert [result.status for result in env.results] == ["timeout"]
    assert elapsed < EPISODE_S + MARGIN_S < OWN_TIMEOUT_S, elapsed


def test_ask_to_code_stops_a_looping_submission_at_the_episodes_deadline() -> None:
    spec = load_spec("ask_to_code")
    rules = spec.rules(timeout_s=EPISODE_S)
    started = time.monotonic()
    rollout = play(spec.make(), spec.example_task, scripted([f"```python\n{FOREVER}```"]), rules)
    if isinstance(rollout.error, SandboxUnavailableError):  # pragma: no cover - depends on the kernel
        pytest.skip(str(rollout.error))
    assert time.monotonic() - started < EPISODE_S + MARGIN_S


def test_a_nested_deadline_never_extends_the_outer_one() -> None:
    started = time.monotonic()
    with episode_deadline(1.0), episode_deadline(30.0):
        result = run_code(FOREVER, limits=Limits(timeout_s=OWN_TIMEOUT_S))
    assert result.status == "timeout"
    assert time.monotonic() - started < 1.0 + MARGIN_S
