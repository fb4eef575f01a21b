"""The loop's arithmetic: group-relative advantages, the k3 sampler/trainer mismatch, and the infrastructure verdict."""

from __future__ import annotations

import math

import pytest

from mtrl.backends.sessions.figures import group_advantages, is_infrastructure_failure, sampler_kl
from mtrl.backends.sessions.service import Datum, ServiceError
from mtrl.contracts.environment import EpisodeResult
from mtrl.envs.rollout import EndReason, Rollout
from mtrl.sandbox import SandboxUnavailableError


def test_advantages_are_centred_and_scaled_only_when_asked() -> None:
    assert group_advantages([1.0, 0.0, 0.0, 1.0]) == [0.5, -0.5, -0.5, 0.5]
    assert group_advantages([1.0, 0.0, 0.0, 1.0], scale_by_std=True) == [1.0, -1.0, -1.0, 1.0]
    assert group_advantages([0.3, 0.3], scale_by_std=True) == [0.0, 0.0]
    assert group_advantages([]) == []


def test_the_mismatch_is_the_k3_estimate_over_sampled_targets_only() -> None:
    datum = Datum(
        tokens=(1, 2, 3, 4), mask=(0.0, 1.0, 1.0), sampling_logprobs=(-9.0, -1.0, -2.0), advantages=(0.0, 1.0, 1.0)
    )
    trainer = [(-0.1, -1.5, -1.8)]
    expected = sum(math.exp(d) - d - 1 for d in (-0.5, 0.2)) / 2
    assert sampler_kl([datum], trainer) == pytest.approx(expected)
    assert sampler_kl([datum], [(-0.1, -1.0, -2.0)]) == 0.0
    unsampled = Datum(tokens=(1, 2), mask=(0.0,), sampling_logprobs=(0.0,), advantages=(0.0,))
    assert sampler_kl([unsampled], [(-3.0,)]) is None


def rollout(ended: EndReason, error: BaseException | None = None) -> Rollout:
    return Rollout(
        task={},
        messages=[],
        result=EpisodeResult(reward=0.0),
        turns=1,
        ended=ended,
        max_turns=4,
        seconds=0.1,
        error=error,
    )


def test_which_failures_the_infrastructure_is_to_blame_for() -> None:
    assert is_infrastructure_failure(rollout("deadline"))
    assert is_infrastructure_failure(rollout("error", ServiceError("throttled")))
    assert is_infrastructure_failure(rollout("error", SandboxUnavailableError("no isolation")))
    wrapped = RuntimeError("step failed")
    wrapped.__cause__ = ServiceError("session expired")
    assert is_infrastructure_failure(rollout("error", wrapped))
    assert not is_infrastructure_failure(rollout("error", ServiceError("prompt too long", infrastructure=False)))
    assert not is_infrastructure_failure(rollout("error", ValueError("environment bug")))
    assert not is_infrastructure_failure(rollout("done"))
    assert not is_infrastructure_failure(rollout("turn_limit"))
