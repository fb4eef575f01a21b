"""A result no trainer may use — a non-finite reward, component, metric or evaluation, in any numeric type — ends the
episode as an error, through every face of the one episode driver and in every backend's episode path (the local
trainer, the sessions loop, the reward worker of the HyperPod/verl-less backends, the serverless agent, the verl
agent loop's per-sample fields). A NaN reward makes a whole GRPO group's advantages NaN (issue 38 item 4)."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from mtrl.backends.verl.bridge import reward_extra_info
from mtrl.contracts.environment import EpisodeResult, StepResult
from mtrl.envs.rollout import (
    EpisodeRules,
    ResultContractError,
    Rollout,
    Stepper,
    checked_result,
    play,
    play_async,
    play_batch,
    scripted,
)
from mtrl.worker import serverless_agent
from tests.unit.backends.sessions.loop_toys import spec_for
from tests.unit.envs.fake_verifiers import install_fake_verifiers

NON_FINITE = [math.nan, math.inf, -math.inf, np.float64("nan"), np.float32("inf"), np.float16("-inf"), 10**400]
NON_FINITE_IDS = ["nan", "inf", "-inf", "np.float64-nan", "np.float32-inf", "np.float16--inf", "int-10^400"]
WHERE = ["reward", "component", "metric", "evaluation"]


def broken_result(where: str, value: Any) -> EpisodeResult:
    if where == "reward":
        return EpisodeResult(reward=value, components={"hit": 1.0})
    if where == "component":
        return EpisodeResult(reward=1.0, components={"hit": 1.0, "shaped": value})
    if where == "metric":
        return EpisodeResult(reward=1.0, components={"hit": 1.0}, metrics={"length": value})
    return EpisodeResult(reward=1.0, components={"hit": 1.0}, evaluation=value)


class OneTurn:
    """One action, then the result it was built with."""

    def __init__(self, result: Any) -> None:
        self._result = result
        self._done = False
        self.closed = False

    def reset(self, task: Mapping[str, Any]) -> str:
        return "say something"

    def step(self, action: str) -> StepResult:
        self._done = True
        return StepResult("thanks", True)

    @property
    def done(self) -> bool:
        return self._done

    def result(self) -> Any:
        return self._result

    def close(self) -> None:
        self.closed = True


def _played_every_way(result: Any) -> list[Rollout]:
    rules = EpisodeRules(max_turns=2)

    async def policy(request: Any) -> str:
        return "hello"

    stepper = Stepper(OneTurn(result), {}, rules)
    stepper.act("hello")
    return [
        play(OneTurn(result), {}, scripted(["hello"]), rules),
        play_batch([OneTurn(result)], [{}], lambda asked: ["hello"] * len(asked), rules)[0],
        asyncio.run(play_async(OneTurn(result), {}, policy, rules)),
        stepper.finish(),
    ]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("value", NON_FINITE, ids=NON_FINITE_IDS)
def test_every_face_of_the_driver_makes_a_non_finite_result_an_error(where: str, value: Any) -> None:
    for rollout in _played_every_way(broken_result(where, value)):
        assert rollout.status == "error"
        assert rollout.result is None
        assert rollout.reward is None
        assert isinstance(rollout.error, ResultContractError)
        assert "finite" in str(rollout.error) or "[0, 1]" in str(rollout.error)


@pytest.mark.parametrize("result", [{"reward": 1.0}, 1.0, None, EpisodeResult(reward=True)])
def test_a_result_that_is_not_an_episode_result_of_numbers_is_an_error(result: Any) -> None:
    for rollout in _played_every_way(result):
        assert (rollout.status, rollout.result) == ("error", None)


def test_numpy_scalars_that_are_finite_are_accepted_as_plain_floats() -> None:
    numpy_result = EpisodeResult(
        reward=np.float32(0.5),
        components={"hit": np.float64(1.0)},
        metrics={"n": np.int64(3)},
        evaluation=np.float16(1),
    )
    checked = checked_result(numpy_result)
    assert checked == EpisodeResult(reward=0.5, components={"hit": 1.0}, metrics={"n": 3.0}, evaluation=1.0)
    assert all(type(value) is float for value in (checked.reward, *checked.components.values(), checked.evaluation))
    json.dumps(checked.to_dict())  # plain floats: the result serialises
    for rollout in _played_every_way(numpy_result):
        assert rollout.status == "completed"
        assert rollout.reward == 0.5


# --- every backend's episode path -------------------------------------------------------------------------------------


def nan_spec(where: str = "reward", value: Any = math.nan) -> Any:
    return spec_for("nan_env", lambda **_: OneTurn(broken_result(where, value)), max_turns=1)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("value", [math.nan, -math.inf, np.float32("inf")], ids=["nan", "-inf", "np.float32-inf"])
def test_the_reward_worker_reports_an_error_with_its_error_reward(where: str, value: Any) -> None:
    from mtrl.worker.runtime import RolloutRequest, WorkerConfig, play_episode

    class Say:
        def act(self, messages: Any, *, timeout_s: float) -> str:
            return "hello"

    outcome = play_episode(nan_spec(where, value), RolloutRequest("r", "g", {}), Say(), WorkerConfig(error_reward=-1.0))
    assert outcome.status == "error"
    assert outcome.reward == -1.0
    assert outcome.result is None
    assert "finite" in outcome.error or "[0, 1]" in outcome.error


@pytest.mark.parametrize("value", [math.nan, math.inf], ids=["nan", "inf"])
def test_the_serverless_agent_reports_its_low_reward_not_the_non_finite_one(
    value: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    reported: list[float] = []
    monkeypatch.delenv("MTRL_MAX_TURNS", raising=False)
    monkeypatch.setattr(serverless_agent, "environment_spec", lambda env_id: nan_spec("component", value))
    monkeypatch.setattr(serverless_agent, "job_runtime_client", lambda region: object())
    monkeypatch.setattr(serverless_agent, "sample", lambda *args: "hello")
    monkeypatch.setattr(serverless_agent, "report", lambda client, job, trajectory, reward: reported.append(reward))
    payload = {
        "prompt": json.dumps({"prompt": "say something"}),
        "metadata": {"jobArn": "arn:aws:sagemaker:us-west-2:111122223333:job/AgentRFT/x", "rolloutId": "r1"},
    }
    outcome = serverless_agent.handle(payload, remaining_ms=600_000)
    assert len(reported) == 1
    assert math.isfinite(reported[0])
    assert outcome["reward"] == reported[0] == -1.5  # MTRL_INVALID_TASK_REWARD's default
    assert "episode failed" in outcome["ended"]


def test_the_local_trainer_refuses_the_episode_instead_of_training_on_nan() -> None:
    from mtrl.local.policy import LogLinearPolicy
    from mtrl.local.trainer import TaskSplit, Trainer
    from tests.unit.envs.test_rollout import ScriptedAgent

    spec = nan_spec()
    trainer = Trainer(spec, ScriptedAgent("nan_env", ["hello"]), TaskSplit(train=[{}], holdout=[{}]))  # type: ignore[arg-type]
    with pytest.raises(ResultContractError, match="reward must be a finite number"):
        trainer.rollout(LogLinearPolicy(("bias",)), {}, np.random.default_rng(0))


def test_the_verl_agent_loop_sample_of_such_an_episode_says_error() -> None:
    (rollout, *_) = _played_every_way(broken_result("reward", math.nan))
    fields = reward_extra_info(rollout, truncated=False)
    assert fields["error"] == 1.0
    assert fields["success"] == 0.0


def test_the_sessions_loop_never_trains_on_a_non_finite_reward() -> None:
    torch = pytest.importorskip("torch", reason="the mtrl[llm] extra")
    del torch
    from mtrl.backends.sessions.local_service import LocalTrainingService
    from mtrl.backends.sessions.loop import LoopSettings, run_step

    service = LocalTrainingService.tiny(seed=0, device="cpu")
    settings = LoopSettings(steps=1, tasks_per_step=1, group_size=2, max_tokens=1)
    report = run_step(service, nan_spec(), [("t0", {"prompt": "go"})], settings, step=1)
    records = [record for group in report.groups.values() for record in group]
    assert records
    assert all(record.rollout.status == "error" and not record.scored for record in records)
    assert all(record.advantage is None for record in records)
    assert report.fields["error_share"] == 1.0


@pytest.mark.parametrize("task_problems", [[], ["an invalid task"]], ids=["played", "never started"])
def test_the_nova_forge_rubric_never_returns_a_non_finite_reward(
    task_problems: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Nova Forge workers score through the verifiers adapter's rubric: an episode it played (the driver's Stepper)
    # and one it never started (an invalid task, scored by result() alone) both refuse the NaN instead of returning it.
    from mtrl.envs.verifiers_adapter import to_verifiers_environment

    install_fake_verifiers(monkeypatch)
    env = to_verifiers_environment(
        lambda **_: OneTurn(broken_result("reward", math.nan)), validate_task=lambda task: task_problems, max_turns=1
    )
    state: dict[str, Any] = {"prompt": "say something"}
    if not task_problems:
        assert asyncio.run(env.is_completed([], state)) is False
        asyncio.run(env.env_response([{"role": "assistant", "content": "hello"}], state))
    aggregate = env.kwargs["rubric"].funcs[0]
    with pytest.raises(ResultContractError, match="reward must be a finite number"):
        aggregate(state=state)
