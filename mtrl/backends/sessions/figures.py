"""The loop's arithmetic on scores and logprobs: group-relative advantages, the sampler/trainer mismatch, and which
failed episodes the infrastructure (not the policy) is to blame for."""

from __future__ import annotations

import math
from collections.abc import Sequence

from mtrl.backends.sessions.service import Datum, ServiceError
from mtrl.envs.rollout import Rollout
from mtrl.sandbox import SandboxUnavailableError

STD_FLOOR = 1e-6


def group_advantages(rewards: Sequence[float], *, scale_by_std: bool = False) -> list[float]:
    """Each reward minus its group's mean. Not divided by the group's standard deviation unless asked: the division
    gives a group where nearly every episode agrees (a task almost always solved, or almost never) as much weight as
    a contested one (Dr. GRPO, Liu et al. 2025). With ``scale_by_std`` the population standard deviation is used
    (a constant group keeps advantage 0)."""
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    centred = [reward - mean for reward in rewards]
    if not scale_by_std:
        return centred
    std = math.sqrt(sum(value * value for value in centred) / len(centred))
    return centred if std < STD_FLOOR else [value / std for value in centred]


def sampler_kl(data: Sequence[Datum], trainer_logprobs: Sequence[Sequence[float]]) -> float | None:
    """The sampler/trainer mismatch: KL(sampler ‖ trainer) estimated per sampled token with k3 (Schulman's
    ``exp(d) - d - 1``, d = trainer logprob − sampler logprob: unbiased for tokens drawn from the sampler and never
    negative), averaged over every masked-in target of the batch. None when the batch has no sampled target.
    It is 0 when both compute the same distribution; numerics (kernels, precision, a stale sampler) make it grow."""
    total = 0.0
    count = 0
    for datum, logprobs in zip(data, trainer_logprobs, strict=True):
        for weight, sampled, trained in zip(datum.mask, datum.sampling_logprobs, logprobs, strict=True):
            if weight > 0:
                difference = trained - sampled
                total += math.exp(difference) - difference - 1
                count += 1
    return total / count if count else None


def is_infrastructure_failure(rollout: Rollout) -> bool:
    """The episode failed for a reason the policy is not to blame for: the training service failed (a
    ``ServiceError`` marked ``infrastructure``), the sandbox could not run (``SandboxUnavailableError``), or the
    episode ran out of its wall-clock deadline (the driver's ``timeout``: a slow service or sandbox). Such an episode
    is left out of its group and counted apart, never scored 0."""
    if rollout.status == "timeout":
        return True
    error: BaseException | None = rollout.error
    while error is not None:
        if isinstance(error, SandboxUnavailableError) or (isinstance(error, ServiceError) and error.infrastructure):
            return True
        error = error.__cause__
    return False
