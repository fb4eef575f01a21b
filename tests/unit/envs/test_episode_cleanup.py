"""Seeded stateful sandbox with guaranteed cleanup: every driver closes the episode on every exit path.

A probe environment keeps its state in an ``EpisodeState`` (seeded in-memory SQLite + a registered
temporary directory holding one file per case the agent creates). After each driver path — a normal end,
max turns, an exception inside a tool, the worker's timeout — no episode state is left open and every
directory the agent wrote to is gone.
"""

from __future__ import annotations

import asyncio
import sys
import time
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mtrl.contracts.environment import EpisodeResult, StepResult, close_environment, closing
from mtrl.envs.episode_state import EpisodeState, StateError, open_states
from mtrl.envs.registry import EnvironmentSpec
from mtrl.envs.rollout import run_episode
from mtrl.envs.tools import FunctionTool, ToolBox, format_tool_call
from mtrl.worker import serverless_agent
from mtrl.worker.runtime import RolloutRequest, WorkerConfig, play_episode

CREATE = format_tool_call("create_case", {"note": "refund"})
EXPLODE = format_tool_call("explode", {})
FINISH = "that is all"
TASK = {"prompt": "probe", "seed_cases": [{"id": "seed-1", "note": "from the task"}]}
DIRECTORIES: list[Path] = []


class ProbeEnv:
    """Creates a database row and a file per ``create_case``; ``explode`` is a tool with a bug in it."""

    max_turns = 3

    def __init__(self) -> None:
        self.state: EpisodeState | None = None
        self.turns = 0
        self.finished = False
        self.created = 0

    def reset(self, task: Mapping[str, Any]) -> str:
        self.state = EpisodeState(
            schema="CREATE TABLE cases (id TEXT PRIMARY KEY, note TEXT NOT NULL);",
            seed={"cases": list(task.get("seed_cases", []))},
        )
        self.workdir = self.state.temp_dir()
        DIRECTORIES.append(self.workdir)
        self.tools = ToolBox(
            [
                FunctionTool("create_case", "Open a case.", {"note": "what it is about"}, self._create),
                FunctionTool("explode", "A tool with a bug.", {}, self._explode),
            ]
        )
        return self.tools.describe()

    def _create(self, arguments: dict[str, Any]) -> dict[str, str]:
        assert self.state is not None
        self.created += 1
        case_id = f"case-{self.created}"
        self.state.insert("cases", [{"id": case_id, "note": str(arguments["note"])}])
        (self.workdir / case_id).write_text("attachment", encoding="utf-8")
        return {"id": case_id}

    def _explode(self, arguments: dict[str, Any]) -> str:
        raise RuntimeError("the tool crashed")

    def step(self, action: str) -> StepResult:
        self.turns += 1
        outcome = self.tools.handle(action)
        if outcome is None or self.turns >= self.max_turns:
            self.finished = True
        return StepResult(outcome.observation if outcome else "bye", self.finished)

    @property
    def done(self) -> bool:
        return self.finished

    def result(self) -> EpisodeResult:
        assert self.state is not None
        cases = float(len(self.state.rows("cases")))
        return EpisodeResult(reward=cases, components={"cases": cases}, success=self.finished)

    def close(self) -> None:
        if self.state is not None:
            self.state.close()


def probe_module() -> types.ModuleType:
    module = types.ModuleType("blocks_probe")
    module.ENV_ID = "blocks_probe"  # type: ignore[attr-defined]
    module.DESCRIPTION = "cleanup probe"  # type: ignore[attr-defined]
    module.make_env = lambda **_: ProbeEnv()  # type: ignore[attr-defined]
    module.validate_task = lambda metadata: []  # type: ignore[attr-defined]
    module.load_environment = lambda **_: None  # type: ignore[attr-defined]
    module.EXAMPLE_TASK = TASK  # type: ignore[attr-defined]
    module.EXAMPLE_ACTIONS = [CREATE, FINISH]  # type: ignore[attr-defined]
    return module


@pytest.fixture
def spec() -> Iterator[EnvironmentSpec]:
    DIRECTORIES.clear()
    for leftover in open_states():  # a failed test's leak must not fail the next one
        leftover.close()
    yield EnvironmentSpec(env_id="blocks_probe", source="custom", path=Path("."), module=probe_module())
    assert_released()


def assert_released() -> None:
    assert open_states() == [], "an episode state was left open"
    assert DIRECTORIES, "the probe never started an episode"
    assert not [path for path in DIRECTORIES if path.exists()], "a directory the agent wrote to survived"


# --- the block itself ---------------------------------------------------------------------------------------


def test_state_is_seeded_from_the_task_private_and_closed_idempotently() -> None:
    first = EpisodeState(schema="CREATE TABLE t (k TEXT, v INTEGER);", seed={"t": [{"k": "a", "v": 1}]})
    second = EpisodeState(schema="CREATE TABLE t (k TEXT, v INTEGER);", seed={"t": [{"k": "a", "v": 1}]})
    assert first.fingerprint() == second.fingerprint()
    first.insert("t", [{"k": "b", "v": 2}])
    assert second.rows("t") == [{"k": "a", "v": 1}]  # episodes never see each other's writes
    assert first.fingerprint() != second.fingerprint()
    directory = first.temp_dir()
    assert directory.is_dir()
    assert first.resources == [f"directory {directory}"]
    assert {id(state) for state in open_states()} >= {id(first), id(second)}
    first.close()
    first.close()  # idempotent
    second.close()
    assert not directory.exists()
    assert first.resources == []
    assert open_states() == []
    with pytest.raises(StateError, match="closed"):
        first.rows("t")


def test_every_cleanup_runs_even_when_one_fails_and_the_first_error_is_raised() -> None:
    removed: list[str] = []
    state = EpisodeState()
    state.register("a", lambda: removed.append("a"))
    state.register("broken", lambda: (_ for _ in ()).throw(OSError("busy")))
    state.register("c", lambda: removed.append("c"))
    with pytest.raises(OSError, match="busy"):
        state.close()
    assert removed == ["c", "a"]  # newest first, and past the broken one
    assert state.closed
    assert open_states() == []
    state.close()  # nothing left to do, nothing raised


def test_a_resource_registered_after_close_is_removed_at_once() -> None:
    removed: list[str] = []
    state = EpisodeState()
    state.close()
    with pytest.raises(StateError, match="removed at once"):
        state.register("late", lambda: removed.append("late"))
    assert removed == ["late"]


@pytest.mark.parametrize(
    ("schema", "seed", "message"),
    [
        ("CREATE TABLE t (k TEXT);", {"t; DROP TABLE t": [{"k": "a"}]}, "not a valid table"),
        ("CREATE TABLE t (k TEXT);", {"t": [{"k) VALUES (1); --": "a"}]}, "not a valid table or column"),
        ("CREATE TABLE t (k TEXT);", {"missing": [{"k": "a"}]}, "no such table"),
        ("CREATE TABLE t (k TEXT);", {"t": [{}]}, "non-empty object"),
        ("CREATE TABLE t (k TEXT);", {"t": [{"k": {"nested": 1}}]}, "cannot seed"),
        ("NOT SQL", {}, "cannot seed"),
    ],
)
def test_a_bad_seed_is_refused_clearly_and_leaves_nothing_open(schema: str, seed: dict[str, Any], message: str) -> None:
    with pytest.raises(StateError, match=message):
        EpisodeState(schema=schema, seed=seed)
    assert open_states() == []


def test_closing_calls_close_once_and_tolerates_environments_without_it() -> None:
    class Plain:
        pass

    close_environment(Plain())  # no close(): nothing to do
    env = ProbeEnv()
    env.reset(TASK)
    with pytest.raises(ValueError, match="inside"), closing(env):  # type: ignore[arg-type]
        raise ValueError("inside the block")
    assert env.state is not None
    assert env.state.closed


# --- run_episode (mtrl env play --action, smoke checks, registry.play) ---------------------------------------


def test_run_episode_normal_end(spec: EnvironmentSpec) -> None:
    _, result = run_episode(spec.make(), TASK, [CREATE, FINISH])
    assert result.reward == 2.0
    assert result.success


def test_run_episode_max_turns(spec: EnvironmentSpec) -> None:
    _, result = run_episode(spec.make(), TASK, [CREATE] * 10)
    assert result.reward == 1.0 + ProbeEnv.max_turns


def test_run_episode_exception_inside_a_tool(spec: EnvironmentSpec) -> None:
    with pytest.raises(RuntimeError, match="the tool crashed"):
        run_episode(spec.make(), TASK, [CREATE, EXPLODE])


def test_smoke_check_closes_the_episode(spec: EnvironmentSpec) -> None:
    assert spec.smoke_check() == []


def test_smoke_check_reports_an_environment_whose_close_leaks(
    spec: EnvironmentSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ProbeEnv, "close", lambda self: None)  # forgets state.close()
    problems = spec.smoke_check()
    assert problems == [
        "close() left 1 episode state(s) open: the environment's close() must call EpisodeState.close() "
        "(mtrl.envs.episode_state)"
    ]
    for state in open_states():
        state.close()


# --- the reward worker -----------------------------------------------------------------------------------------


class ScriptedPolicy:
    def __init__(self, actions: list[str], delay_s: float = 0.0) -> None:
        self.actions = list(actions)
        self.delay_s = delay_s

    def act(self, messages: list[dict[str, str]], *, timeout_s: float) -> str:
        time.sleep(min(self.delay_s, timeout_s + 0.05))
        return self.actions.pop(0) if self.actions else CREATE


def worker_episode(spec: EnvironmentSpec, policy: ScriptedPolicy, **config: Any) -> Any:
    request = RolloutRequest(rollout_id="r1", group_id="g1", task=dict(TASK))
    return play_episode(spec, request, policy, WorkerConfig(**config))


def test_worker_normal_end(spec: EnvironmentSpec) -> None:
    outcome = worker_episode(spec, ScriptedPolicy([CREATE, FINISH]))
    assert (outcome.status, outcome.reward) == ("completed", 2.0)


def test_worker_max_turns(spec: EnvironmentSpec) -> None:
    outcome = worker_episode(spec, ScriptedPolicy([]), max_turns=2)
    assert (outcome.status, outcome.reward) == ("completed", 3.0)  # stopped by the worker, env not done


def test_worker_exception_inside_a_tool(spec: EnvironmentSpec) -> None:
    outcome = worker_episode(spec, ScriptedPolicy([CREATE, EXPLODE]))
    assert outcome.status == "error"
    assert "the tool crashed" in outcome.error
    assert outcome.reward == 2.0  # scored as it stands, before the state was released


def test_worker_timeout(spec: EnvironmentSpec) -> None:
    outcome = worker_episode(spec, ScriptedPolicy([CREATE, CREATE, CREATE], delay_s=0.2), episode_timeout_s=0.3)
    assert outcome.status == "timeout"
    assert outcome.reward >= 1.0


def test_worker_reports_a_broken_close_without_failing(spec: EnvironmentSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_close(self: ProbeEnv) -> None:
        if self.state is not None:
            self.state.close()
        raise OSError("cleanup failed")

    monkeypatch.setattr(ProbeEnv, "close", broken_close)
    outcome = worker_episode(spec, ScriptedPolicy([FINISH]))
    assert outcome.status == "completed"


# --- the local trainer ----------------------------------------------------------------------------------------


class ProbeEpisode:
    def __init__(self, actions: list[str]) -> None:
        self.actions = actions

    def options(self) -> tuple[list[str], Any]:
        return [self.actions[0]], np.ones((1, 1))

    def observe(self, action: str, observation: str) -> None:
        if len(self.actions) > 1:
            self.actions.pop(0)


class ProbeAgent:
    env_id = "blocks_probe"
    feature_names = ("bias",)

    def __init__(self, actions: list[str], max_turns: int = 10) -> None:
        self.actions = actions
        self.max_turns = max_turns

    def start(self, task: Mapping[str, Any], observation: str, rng: np.random.Generator) -> ProbeEpisode:
        return ProbeEpisode(list(self.actions))


@pytest.mark.parametrize(
    ("actions", "max_turns", "reward"),
    [([CREATE, FINISH], 10, 2.0), ([CREATE], 2, 3.0), ([CREATE], 10, 4.0)],
    ids=["normal-end", "agent-max-turns", "env-max-turns"],
)
def test_local_trainer_rollout(spec: EnvironmentSpec, actions: list[str], max_turns: int, reward: float) -> None:
    from mtrl.local.policy import LogLinearPolicy
    from mtrl.local.trainer import TaskSplit, Trainer

    trainer = Trainer(spec, ProbeAgent(actions, max_turns), TaskSplit(train=[TASK], holdout=[TASK]))  # type: ignore[arg-type]
    rollout = trainer.rollout(LogLinearPolicy(("bias",)), TASK, np.random.default_rng(0))
    assert rollout.result.reward == reward


def test_local_trainer_rollout_exception_inside_a_tool(spec: EnvironmentSpec) -> None:
    from mtrl.local.policy import LogLinearPolicy
    from mtrl.local.trainer import TaskSplit, Trainer

    trainer = Trainer(spec, ProbeAgent([EXPLODE]), TaskSplit(train=[TASK], holdout=[TASK]))  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="the tool crashed"):
        trainer.rollout(LogLinearPolicy(("bias",)), TASK, np.random.default_rng(0))


# --- the language-model rollouts (mtrl env try --policy hf:/openai:) -------------------------------------------


class ScriptedChatPolicy:
    name = "scripted"

    def __init__(self, actions: list[str]) -> None:
        self.actions = actions

    def begin(self, messages: list[dict[str, str]]) -> Any:
        from mtrl.llm.policies import Context

        return Context(messages=list(messages))

    def generate(self, contexts: list[Any], sampling: Any) -> list[Any]:
        from mtrl.llm.policies import Reply

        replies = []
        for context in contexts:
            turn = sum(1 for message in context.messages if message["role"] == "assistant")
            text = self.actions[min(turn, len(self.actions) - 1)]
            replies.append(Reply(text=text, prompt_tokens=1, completion_tokens=1))
        return replies

    def extend(self, context: Any, reply: Any, observation: str | None) -> None:
        context.messages.append({"role": "assistant", "content": reply.text})
        if observation is not None:
            context.messages.append({"role": "user", "content": observation})


@pytest.mark.parametrize(
    ("actions", "max_turns", "reward"),
    [([CREATE, FINISH], 8, 2.0), ([CREATE], 2, 3.0)],
    ids=["normal-end", "max-turns"],
)
def test_llm_rollouts(spec: EnvironmentSpec, actions: list[str], max_turns: int, reward: float) -> None:
    from mtrl.llm.policies import Sampling
    from mtrl.llm.rollout import play_groups

    groups = play_groups(
        spec, ScriptedChatPolicy(actions), [TASK], group_size=3, sampling=Sampling(), max_turns=max_turns
    )
    assert [episode.result.reward for episode in groups[0]] == [reward] * 3
    assert len(DIRECTORIES) == 3


def test_llm_rollouts_exception_inside_a_tool(spec: EnvironmentSpec) -> None:
    from mtrl.llm.policies import Sampling
    from mtrl.llm.rollout import play_groups

    with pytest.raises(RuntimeError, match="the tool crashed"):
        play_groups(spec, ScriptedChatPolicy([CREATE, EXPLODE]), [TASK], group_size=2, sampling=Sampling(), max_turns=5)
    assert len(DIRECTORIES) == 2  # both episodes of the group were released, not only the one that raised


# --- the verifiers adapter (Nova Forge reward workers) ---------------------------------------------------------


@pytest.fixture
def verifiers_env(monkeypatch: pytest.MonkeyPatch) -> Any:
    class FakeMultiTurnEnv:
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs

    class FakeRubric:
        def __init__(self, funcs: list[Any], weights: list[float]) -> None:
            self.funcs = funcs

    module = types.ModuleType("verifiers")
    module.MultiTurnEnv = FakeMultiTurnEnv  # type: ignore[attr-defined]
    module.Rubric = FakeRubric  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "verifiers", module)
    from mtrl.envs.verifiers_adapter import to_verifiers_environment

    return to_verifiers_environment(ProbeEnv, validate_task=lambda metadata: [], component_names=["cases"])


def verifiers_turn(env: Any, state: dict[str, Any], action: str) -> bool:
    asyncio.run(env.env_response([{"role": "assistant", "content": action}], state))
    return bool(asyncio.run(env.is_completed([], state)))


def test_verifiers_adapter_normal_end(spec: EnvironmentSpec, verifiers_env: Any) -> None:
    state: dict[str, Any] = {"prompt": "probe", "info": {}}
    assert asyncio.run(verifiers_env.is_completed([], state)) is False
    assert verifiers_turn(verifiers_env, state, CREATE) is False
    assert verifiers_turn(verifiers_env, state, FINISH) is True
    assert open_states() == []  # closed as soon as the rollout completed
    scores = [func(state=state) for func in verifiers_env.kwargs["rubric"].funcs]
    assert scores == [1.0, 1.0]  # one case created (no seed rows in a verifiers row), read from the kept result


def test_verifiers_adapter_rollout_ended_by_verifiers_max_turns(spec: EnvironmentSpec, verifiers_env: Any) -> None:
    state: dict[str, Any] = {"prompt": "probe", "info": {}}
    assert verifiers_turn(verifiers_env, state, CREATE) is False
    assert len(open_states()) == 1  # verifiers stops here at its max_turns, then scores
    assert [func(state=state) for func in verifiers_env.kwargs["rubric"].funcs] == [1.0, 1.0]


def test_verifiers_adapter_invalid_task_completes_without_scoring_an_unstarted_episode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = types.ModuleType("verifiers")
    module.MultiTurnEnv = type("FakeMultiTurnEnv", (), {"__init__": lambda self, **kwargs: None})  # type: ignore[attr-defined]
    module.Rubric = lambda funcs, weights: None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "verifiers", module)
    from mtrl.envs.verifiers_adapter import to_verifiers_environment

    env = to_verifiers_environment(ProbeEnv, validate_task=lambda metadata: ["no ticket"])
    state: dict[str, Any] = {"prompt": "probe"}
    assert asyncio.run(env.is_completed([], state)) is True  # ProbeEnv.result() before reset() would raise
    assert "mtrl_result" not in state


# --- the serverless agent (Lambda) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("actions", "max_turns", "ended"),
    [([CREATE, FINISH], "8", "done"), ([CREATE], "2", "turn limit reached"), ([CREATE, EXPLODE], "8", "raised")],
)
def test_serverless_agent(
    spec: EnvironmentSpec, monkeypatch: pytest.MonkeyPatch, actions: list[str], max_turns: str, ended: str
) -> None:
    script = list(actions)
    reported: list[float] = []
    monkeypatch.setenv("MTRL_MAX_TURNS", max_turns)
    monkeypatch.setattr(serverless_agent, "environment_spec", lambda env_id: spec)
    monkeypatch.setattr(serverless_agent, "job_runtime_client", lambda region: object())
    monkeypatch.setattr(serverless_agent, "sample", lambda *args: script.pop(0) if len(script) > 1 else script[0])
    monkeypatch.setattr(serverless_agent, "report", lambda client, job, trajectory, reward: reported.append(reward))
    payload = {"prompt": '{"prompt": "probe"}', "metadata": {"jobArn": "arn:job", "rolloutId": "r1"}}
    if ended == "raised":
        with pytest.raises(RuntimeError, match="the tool crashed"):
            serverless_agent.handle(payload)
        return
    outcome = serverless_agent.handle(payload)
    assert outcome["ended"] == ended
    assert reported == [outcome["reward"]]


# --- mtrl env play, interactively ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "raises"),
    [([CREATE, FINISH], False), ([CREATE], False), ([CREATE, EXPLODE], True)],
    ids=["normal-end", "end-of-input", "exception-inside-a-tool"],
)
def test_env_play_interactively(
    spec: EnvironmentSpec, monkeypatch: pytest.MonkeyPatch, lines: list[str], raises: bool
) -> None:
    import io

    from mtrl.cli import env_cmd

    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(line + "\n" for line in lines)))
    if raises:
        with pytest.raises(RuntimeError, match="the tool crashed"):
            env_cmd._play_interactively(spec, dict(TASK))
    else:
        env_cmd._play_interactively(spec, dict(TASK))
