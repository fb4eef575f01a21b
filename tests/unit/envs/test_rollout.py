"""The one episode driver (``mtrl.envs.rollout``): its rules, and that every consumer plays the same game with it.

The parity tests play each registered environment (the template included) through every driver — the registry's
scripted play, ``mtrl env play --json``, the reward worker, the serverless agent, the language-model rollouts
(``env try``/``eval``), the local trainer and the verifiers adapter — with the same scripted actions, and compare
what the policy was shown each turn, the number of turns and the reward.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from mtrl.cli import app
from mtrl.contracts.environment import DEFAULT_MAX_TURNS, DEFAULT_SYSTEM_PROMPT, EpisodeResult, StepResult
from mtrl.envs.registry import EnvironmentSpec, list_environments, load_spec
from mtrl.envs.rollout import (
    ActionRequest,
    ContractError,
    EpisodeRules,
    Stepper,
    play,
    play_async,
    play_batch,
    scripted,
)
from mtrl.worker import serverless_agent
from tests.unit.envs.fake_verifiers import install_fake_verifiers

ROOT = Path(__file__).resolve().parents[3]


class Counter:
    """Counts to ``limit`` actions; records what it was sent and whether it was closed."""

    def __init__(self, limit: int = 100, observation: Any = "go") -> None:
        self.limit = limit
        self.observation = observation
        self.actions: list[Any] = []
        self.closed = 0
        self.finished = False

    def reset(self, task: Mapping[str, Any]) -> str:
        return "start"

    def step(self, action: str) -> StepResult:
        self.actions.append(action)
        if action == "boom":
            raise RuntimeError("the environment crashed")
        self.finished = len(self.actions) >= self.limit or action == "stop"
        return StepResult(self.observation, self.finished)

    @property
    def done(self) -> bool:
        return self.finished

    def result(self) -> EpisodeResult:
        return EpisodeResult(reward=float(len(self.actions)), components={"actions": float(len(self.actions))})

    def close(self) -> None:
        self.closed += 1


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_turn_limit_is_the_rules_and_a_caller_may_only_lower_it() -> None:
    env = Counter()
    rollout = play(env, {}, scripted(["a"] * 50), EpisodeRules(max_turns=5))
    assert (rollout.turns, rollout.ended, rollout.hit_turn_limit, rollout.status) == (
        5,
        "turn_limit",
        True,
        "completed",
    )
    assert env.actions == ["a"] * 5
    assert env.closed == 1
    rules = EpisodeRules(max_turns=5)
    assert rules.capped(3).max_turns == 3
    assert rules.capped(9).max_turns == 5  # never raised above the environment's
    with pytest.raises(ValueError, match="max_turns"):
        EpisodeRules(max_turns=0)


def test_roles_system_prompt_and_the_conversation_the_policy_sees() -> None:
    seen: list[list[dict[str, str]]] = []

    def policy(messages: list[dict[str, str]], *, timeout_s: float | None) -> str:
        seen.append(messages)
        return "stop" if len(seen) == 2 else "a"

    rollout = play(Counter(), {}, policy, EpisodeRules(system_prompt="be brief"))
    assert seen[0] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "start"}]
    assert [m["role"] for m in seen[1]] == ["system", "user", "assistant", "user"]
    assert rollout.ended == "done"
    assert [m["role"] for m in rollout.transcript] == ["user", "assistant", "user", "assistant", "user"]
    assert EpisodeRules().system_prompt == DEFAULT_SYSTEM_PROMPT
    assert EpisodeRules().max_turns == DEFAULT_MAX_TURNS


def test_the_string_contract_on_actions_and_observations() -> None:
    env = Counter(limit=4)
    rollout = play(env, {}, scripted([None, 42, "caf\ud800e", "ok"]), EpisodeRules())
    assert env.actions == ["", "42", "caf\ufffde", "ok"]
    assert rollout.coerced_actions == 3
    json.dumps(rollout.messages).encode("utf-8")  # always encodable
    broken = Counter(observation=None)
    rollout = play(broken, {}, scripted(["a"]), EpisodeRules())
    assert isinstance(rollout.error, ContractError)
    assert (rollout.ended, broken.closed) == ("error", 1)


def test_an_exception_is_scored_closed_and_handed_back_not_raised() -> None:
    env = Counter()
    rollout = play(env, {}, scripted(["a", "boom", "never"]), EpisodeRules())
    assert (rollout.ended, rollout.status, rollout.turns, env.closed) == ("error", "error", 2, 1)
    assert rollout.result is not None
    assert rollout.reward == 2.0
    with pytest.raises(RuntimeError, match="crashed"):
        rollout.raise_error()

    def failing(messages: list[dict[str, str]], *, timeout_s: float | None) -> str:
        raise ConnectionError("policy down")

    rollout = play(Counter(), {}, failing, EpisodeRules())
    assert isinstance(rollout.error, ConnectionError)
    assert rollout.turns == 0


def test_the_deadline_is_checked_between_turns_and_a_late_action_is_not_applied() -> None:
    clock = FakeClock()
    env = Counter()
    timeouts: list[float | None] = []

    def slow(messages: list[dict[str, str]], *, timeout_s: float | None) -> str:
        timeouts.append(timeout_s)
        clock.now += 4.0
        return "a"

    rollout = play(env, {}, slow, EpisodeRules(timeout_s=10.0), clock=clock)
    assert timeouts == [10.0, 6.0, 2.0]
    assert (rollout.ended, rollout.status, rollout.turns) == ("deadline", "timeout", 3)
    assert env.actions == ["a", "a"]  # the third came after the deadline
    assert env.closed == 1

    def times_out(messages: list[dict[str, str]], *, timeout_s: float | None) -> str:
        raise TimeoutError("no answer in time")

    assert play(Counter(), {}, times_out, EpisodeRules()).status == "timeout"


def test_stop_episode_ends_it_as_it_stands() -> None:
    env = Counter()
    rollout = play(env, {}, scripted(["a", "a"]), EpisodeRules())
    assert (rollout.ended, rollout.turns, rollout.reward, env.closed) == ("policy_stopped", 2, 2.0, 1)


def test_batch_async_and_stepper_faces_play_the_same_episode() -> None:
    def batch(requests: Any) -> list[str]:
        return ["stop" if request.turn == 2 else "a" for _, request in requests]

    batched = play_batch([Counter(), Counter(limit=2)], [{}, {}], batch, EpisodeRules())
    assert [(r.turns, r.reward) for r in batched] == [(3, 3.0), (2, 2.0)]

    async def policy(request: ActionRequest) -> str:
        await asyncio.sleep(0)
        return "stop" if request.turn == 2 else "a"

    awaited = asyncio.run(play_async(Counter(), {}, policy, EpisodeRules()))
    assert (awaited.turns, awaited.reward) == (3, 3.0)
    stepper = Stepper(Counter(), {}, EpisodeRules())
    while stepper.request is not None:
        stepper.act("stop" if stepper.request.turn == 2 else "a")
    assert (stepper.finish().turns, stepper.finish().reward) == (3, 3.0)


def test_the_async_face_keeps_the_event_loop_free_while_the_environment_works() -> None:
    # issue 35 item 11: verl runs many agent loops in one event loop (AgentLoopWorker); an environment step that
    # blocks it (a sandboxed program, a judge call) would stall every other episode's generation.
    import threading
    import time

    loop_thread: list[int] = []
    env_threads: list[int] = []

    class Slow(Counter):
        def step(self, action: Any) -> Any:
            env_threads.append(threading.get_ident())
            time.sleep(0.2)
            return super().step(action)

    async def policy(request: ActionRequest) -> str:
        return "stop" if request.turn == 1 else "a"

    async def main() -> tuple[Any, int]:
        loop_thread.append(threading.get_ident())
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        running = asyncio.create_task(ticker())
        rollout = await play_async(Slow(), {}, policy, EpisodeRules())
        running.cancel()
        return rollout, ticks

    rollout, ticks = asyncio.run(main())
    assert rollout.turns == 2
    assert env_threads
    assert loop_thread[0] not in env_threads  # the steps ran off the event loop's thread
    assert ticks >= 10  # and the loop kept running while they slept (0.4 s of steps)


def test_an_abandoned_episode_is_still_closed() -> None:
    env = Counter()
    stepper = Stepper(env, {}, EpisodeRules())
    stepper.act("a")
    del stepper
    gc.collect()
    assert env.closed == 1
    env = Counter()
    half = Stepper(env, {}, EpisodeRules())
    rollout = half.finish()
    assert (rollout.ended, env.closed) == ("policy_stopped", 1)


def test_a_failing_batch_policy_ends_every_episode_it_was_asked_for() -> None:
    envs = [Counter(), Counter()]

    def broken(requests: Any) -> list[str]:
        raise RuntimeError("generation failed")

    rollouts = play_batch(envs, [{}, {}], broken, EpisodeRules())
    assert [r.ended for r in rollouts] == ["error", "error"]
    assert [env.closed for env in envs] == [1, 1]


# --- parity: every driver plays the same game ------------------------------------------------------------------------

ENVIRONMENTS = [env_id for env_id, _ in list_environments(include_template=True)]


def script_for(spec: EnvironmentSpec) -> list[str]:
    """The example actions, then more actions than the turn limit allows (so the limit is what ends it)."""
    actions = list(spec.example_actions)
    return actions[:-1] + [actions[0]] * (spec.max_turns + 2)


Observed = tuple[int, float, list[str]]  # turns, reward, the observations the policy was shown in order


def observations(messages: list[dict[str, str]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "user"]


def via_registry(spec: EnvironmentSpec, actions: list[str]) -> Observed:
    messages, result = spec.play(spec.example_task, actions)
    turns = sum(1 for m in messages if m["role"] == "assistant")
    assert messages[0] == {"role": "system", "content": spec.system_prompt}
    return turns, result.reward, observations(messages)


def via_cli(spec: EnvironmentSpec, actions: list[str]) -> Observed:
    args = ["env", "play", spec.env_id, "--json", "--task", json.dumps(spec.example_task)]
    for action in actions:
        args += ["--action", action]
    outcome = CliRunner().invoke(app, args)
    assert outcome.exit_code == 0, outcome.output
    document = json.loads(outcome.output)
    transcript = document["transcript"]
    assert document["system_prompt"] == spec.system_prompt
    return (
        sum(1 for m in transcript if m["role"] == "assistant"),
        document["result"]["reward"],
        observations(transcript),
    )


class ScriptedWorkerPolicy:
    def __init__(self, actions: list[str]) -> None:
        self.actions = list(actions)
        self.seen: list[list[dict[str, str]]] = []

    def act(self, messages: list[dict[str, str]], *, timeout_s: float) -> str:
        self.seen.append(messages)
        return self.actions.pop(0)


def via_worker(spec: EnvironmentSpec, actions: list[str]) -> Observed:
    from mtrl.worker.runtime import RolloutRequest, WorkerConfig, play_episode

    policy = ScriptedWorkerPolicy(actions)
    outcome = play_episode(spec, RolloutRequest("r", "g", spec.example_task), policy, WorkerConfig())
    assert outcome.status == "completed", outcome.error
    assert all(seen[0] == {"role": "system", "content": spec.system_prompt} for seen in policy.seen)
    return outcome.turns, outcome.reward, observations(outcome.transcript)


def via_serverless_agent(spec: EnvironmentSpec, actions: list[str], monkeypatch: pytest.MonkeyPatch) -> Observed:
    script = list(actions)
    seen: list[list[dict[str, str]]] = []
    reported: list[float] = []

    def sample(client: Any, job: str, trajectory: str, messages: list[dict[str, str]], params: Any) -> str:
        seen.append(list(messages))
        return script.pop(0)

    monkeypatch.delenv("MTRL_MAX_TURNS", raising=False)
    monkeypatch.setattr(serverless_agent, "environment_spec", lambda env_id: spec)
    monkeypatch.setattr(serverless_agent, "job_runtime_client", lambda region: object())
    monkeypatch.setattr(serverless_agent, "sample", sample)
    monkeypatch.setattr(serverless_agent, "report", lambda client, job, trajectory, reward: reported.append(reward))
    payload = {
        "prompt": json.dumps(spec.example_task),
        "metadata": {"jobArn": "arn:aws:sagemaker:us-west-2:111122223333:job/AgentRFT/x", "rolloutId": "r1"},
    }
    outcome = serverless_agent.handle(payload, remaining_ms=600_000)
    assert outcome["reported"] is True
    assert outcome["ended"] in {"done", "turn limit reached"}
    assert seen[0][0] == {"role": "system", "content": spec.system_prompt}
    # The agent never sees the last observation (no action follows it): take it from the environment itself.
    turns = len(seen)
    shown = observations(seen[-1])
    return turns, reported[0], shown


class ScriptedChatPolicy:
    name = "scripted"

    def __init__(self, actions: list[str]) -> None:
        self.actions = list(actions)

    def begin(self, messages: list[dict[str, str]]) -> Any:
        from mtrl.llm.policies import Context

        return Context(messages=list(messages))

    def generate(self, contexts: list[Any], sampling: Any) -> list[Any]:
        from mtrl.llm.policies import Reply

        replies = []
        for context in contexts:
            turn = sum(1 for message in context.messages if message["role"] == "assistant")
            replies.append(Reply(text=self.actions[turn], prompt_tokens=1, completion_tokens=1))
        return replies

    def extend(self, context: Any, reply: Any, observation: str | None) -> None:
        context.messages.append({"role": "assistant", "content": reply.text})
        if observation is not None:
            context.messages.append({"role": "user", "content": observation})


def via_llm(spec: EnvironmentSpec, actions: list[str]) -> Observed:
    from mtrl.llm.policies import Sampling
    from mtrl.llm.rollout import play as play_llm

    (episode,) = play_llm(spec, ScriptedChatPolicy(actions), [spec.example_task], sampling=Sampling())
    assert episode.context.messages[0] == {"role": "system", "content": spec.system_prompt}
    return episode.turns, episode.result.reward, observations(episode.transcript)


class ScriptedAgent:
    feature_names = ("bias",)

    def __init__(self, env_id: str, actions: list[str]) -> None:
        self.env_id = env_id
        self.actions = actions
        self.max_turns = 10_000  # the environment's limit applies
        self.shown: list[str] = []

    def start(self, task: Mapping[str, Any], observation: str, rng: np.random.Generator) -> Any:
        agent = self
        agent.shown.append(observation)
        queue = list(self.actions)

        class Episode:
            def options(self) -> tuple[list[str], Any]:
                return [queue[0]], np.ones((1, 1))

            def observe(self, action: str, observation: str) -> None:
                queue.pop(0)
                agent.shown.append(observation)

        return Episode()


def via_local_trainer(spec: EnvironmentSpec, actions: list[str]) -> Observed:
    from mtrl.local.policy import LogLinearPolicy
    from mtrl.local.trainer import TaskSplit, Trainer

    agent = ScriptedAgent(spec.env_id, actions)
    trainer = Trainer(spec, agent, TaskSplit(train=[spec.example_task], holdout=[spec.example_task]))  # type: ignore[arg-type]
    rollout = trainer.rollout(LogLinearPolicy(("bias",)), spec.example_task, np.random.default_rng(0))
    assert rollout.episode is not None
    return rollout.turns, rollout.result.reward, observations(rollout.episode.transcript)


def via_verifiers(spec: EnvironmentSpec, actions: list[str], monkeypatch: pytest.MonkeyPatch) -> Observed:
    install_fake_verifiers(monkeypatch)
    env = spec.load_environment()
    assert env.kwargs["max_turns"] == spec.max_turns
    assert env.kwargs["system_prompt"] == spec.system_prompt
    state: dict[str, Any] = dict(spec.example_task)
    shown: list[str] = []
    turns = 0
    assert asyncio.run(env.is_completed([], state)) is False
    shown.append(state["mtrl_first_observation"])
    # verifiers stops at its max_turns (the environment's): it never asks for more.
    while turns < env.kwargs["max_turns"] and not asyncio.run(env.is_completed([], state)):
        reply, state = asyncio.run(env.env_response([{"role": "assistant", "content": actions[turns]}], state))
        shown.append(reply[0]["content"])
        turns += 1
    reward = env.kwargs["rubric"].funcs[0](state=state)
    return turns, reward, shown


Driver = Callable[..., Observed]


@pytest.mark.parametrize("env_id", ENVIRONMENTS)
def test_every_driver_plays_the_same_game(env_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_spec(env_id)
    actions = script_for(spec)
    reference = via_registry(spec, actions)
    turns, reward, shown = reference
    assert 1 <= turns <= spec.max_turns
    drivers: dict[str, Observed] = {
        "env play --json": via_cli(spec, actions),
        "reward worker": via_worker(spec, actions),
        "env try / eval (language model)": via_llm(spec, actions),
        "local trainer": via_local_trainer(spec, actions),
        "verifiers adapter": via_verifiers(spec, actions, monkeypatch),
    }
    for name, observed in drivers.items():
        assert observed == reference, name
    agent_turns, agent_reward, agent_shown = via_serverless_agent(spec, actions, monkeypatch)
    assert (agent_turns, agent_reward) == (turns, reward)
    assert agent_shown == shown[:turns]  # every observation but the last precedes an action
