"""mtrl's GRPO loop on a training service: per step, a group of episodes per task through the one episode driver,
token in and token out (``trajectory``), group-relative advantages, one forward-backward with the sampler's
logprobs (the importance-sampling correction), an optimizer step, and fresh sampler weights.

Per step it returns plain data (``StepReport``): every episode grouped by task id, the figures every backend
reports (``mtrl.health.episodes.episode_fields`` and the per-component within-group spread of
``mtrl.health.signal_health``), the episodes the infrastructure failed (``infra_failed``: left out of their groups'
figures and of training, never scored 0), the loss and the sampler/trainer mismatch (``figures.sampler_kl``). It
writes no signal rows: the caller feeds ``StepReport.groups`` to the one signal-row builder.

What is trained on: every episode with a score that is not an infrastructure failure, with advantage
``reward - group mean`` (``figures.group_advantages``). An episode that ended in any other error keeps the score
the environment gave it as it stood (the policy's or the environment's failure, counted in ``error_share``). A
group whose advantages are all 0 (every episode scored alike) adds nothing to the gradient and is not sent; a step
with nothing to send takes no optimizer step. The services' losses are sums over sampled tokens (Tinker's
definition; ``local_service``), so the learning rate is per token of advantage, not per episode.

Held-out evaluation (``evaluate``) plays each held-out task once through the same driver, greedy by default.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from mtrl.backends.sessions.figures import group_advantages, is_infrastructure_failure, sampler_kl
from mtrl.backends.sessions.service import (
    AdamParams,
    Datum,
    LossName,
    SamplingParams,
    TokenUsage,
    TrainingService,
)
from mtrl.backends.sessions.trajectory import TokenPolicy, Trajectory
from mtrl.contracts.environment import Environment, EpisodeResult, close_environment
from mtrl.envs.registry import EnvironmentSpec
from mtrl.envs.rollout import Rollout, Status, play_batch
from mtrl.health.episodes import episode_fields
from mtrl.health.signal_health import SignalHealth
from mtrl.health.signal_health import compute as compute_signal_health

Task = Mapping[str, Any]


@dataclass(frozen=True)
class LoopSettings:
    """``steps``: the last step to run; ``max_turns`` may only lower the environment's own limit;
    ``episode_timeout_s``: each episode's wall-clock deadline (None: none); ``eval_temperature``: 0 is greedy."""

    steps: int
    tasks_per_step: int = 2
    group_size: int = 4
    max_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    loss: LossName = "importance_sampling"
    adam: AdamParams = field(default_factory=AdamParams)
    scale_by_std: bool = False
    seed: int = 0
    max_turns: int | None = None
    episode_timeout_s: float | None = None
    eval_temperature: float = 0.0
    save_state_every: int = 0  # 0: never (the caller saves)
    env_args: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.steps < 0 or self.tasks_per_step < 1 or self.group_size < 2:
            raise ValueError("steps must be >= 0, tasks_per_step >= 1 and group_size >= 2 (a group needs a contrast)")

    def sampling(self) -> SamplingParams:
        return SamplingParams(max_tokens=self.max_tokens, temperature=self.temperature, top_p=self.top_p)


@dataclass(frozen=True)
class EpisodeRecord:
    """One episode: the driver's ``Rollout``, the token sequence behind it, and how the loop used it. It reads as an
    ``mtrl.health.episodes.ScoredEpisode`` (``result``, ``status``, ``turns``, ``hit_turn_limit``)."""

    task_id: str
    rollout: Rollout
    trajectory: Trajectory | None  # None when the episode ended before the first sample
    infrastructure_failure: bool
    advantage: float | None = None  # None: not trained on

    @property
    def result(self) -> EpisodeResult | None:
        return self.rollout.result

    @property
    def status(self) -> Status:
        return self.rollout.status

    @property
    def turns(self) -> int:
        return self.rollout.turns

    @property
    def hit_turn_limit(self) -> bool:
        return self.rollout.hit_turn_limit

    @property
    def scored(self) -> bool:
        """Counts in its group's figures: not an infrastructure failure, and the environment scored it."""
        return not self.infrastructure_failure and self.rollout.result is not None


@dataclass(frozen=True)
class StepReport:
    step: int
    groups: dict[str, list[EpisodeRecord]]  # by task id, every episode of the step (infrastructure failures flagged)
    fields: dict[str, Any]  # episode_fields of the scored episodes (reward_mean, spread, malformed_share, turns...)
    signal_health: SignalHealth  # per-component within-group spread of the scored episodes
    infra_failed: int
    trained_episodes: int
    loss: float | None  # None: nothing was sent (every group flat, or every episode failed)
    sampler_kl: float | None
    usage: TokenUsage  # this step's tokens
    seconds: float
    sampler_weights: str | None  # where the step's weights were saved for the sampler
    state: str | None = None  # the saved state's reference, when one was saved after this step

    def scored_groups(self) -> list[list[EpisodeRecord]]:
        return [[record for record in group if record.scored] for group in self.groups.values()]


@dataclass(frozen=True)
class Evaluation:
    """Held-out tasks played once each under the sampler's weights at ``step``."""

    step: int
    episodes: dict[str, EpisodeRecord]
    fields: dict[str, Any]
    infra_failed: int

    @property
    def reward_mean(self) -> float | None:
        value = self.fields["reward_mean"]
        return None if value is None else float(value)

    @property
    def success_share(self) -> float | None:
        scored = [r.result for r in self.episodes.values() if r.scored and r.result is not None]
        return sum(1 for result in scored if result.success) / len(scored) if scored else None


@dataclass
class LoopResult:
    steps: list[StepReport] = field(default_factory=list)
    before: Evaluation | None = None
    after: Evaluation | None = None


def train(
    service: TrainingService,
    spec: EnvironmentSpec,
    tasks: Mapping[str, Task],
    settings: LoopSettings,
    *,
    eval_tasks: Mapping[str, Task] | None = None,
    start_step: int = 0,
    on_step: Callable[[StepReport], None] | None = None,
) -> LoopResult:
    """Steps ``start_step + 1`` to ``settings.steps`` (a resumed run passes the last finished step, after
    ``service.load_state``), with held-out evaluation before and after when ``eval_tasks`` is given.

    A ``ServiceError`` from ``forward_backward``, ``optim_step`` or a save is raised: that step is lost, and the
    caller resumes from the last saved state (``save_state_every``). Sampling failures end only their episodes."""
    result = LoopResult()
    if start_step > 0:  # a resumed session: the sampler serves the restored weights
        service.save_weights_for_sampler(f"step-{start_step}")
    if eval_tasks:
        result.before = evaluate(service, spec, eval_tasks, settings, step=start_step)
    for step in range(start_step + 1, settings.steps + 1):
        report = run_step(service, spec, tasks_for_step(tasks, settings, step), settings, step)
        result.steps.append(report)
        if on_step is not None:
            on_step(report)
    if eval_tasks:
        result.after = evaluate(service, spec, eval_tasks, settings, step=settings.steps)
    return result


def tasks_for_step(tasks: Mapping[str, Task], settings: LoopSettings, step: int) -> list[tuple[str, Task]]:
    """The step's tasks: ``tasks_per_step`` distinct ones (all of them when there are fewer), drawn from the step's
    own seed, so a resumed run draws what the first attempt would have."""
    ids = sorted(tasks)
    chosen = _rng(settings.seed, "tasks", step).sample(ids, min(settings.tasks_per_step, len(ids)))
    return [(task_id, tasks[task_id]) for task_id in chosen]


def run_step(
    service: TrainingService,
    spec: EnvironmentSpec,
    tasks: Sequence[tuple[str, Task]],
    settings: LoopSettings,
    step: int,
) -> StepReport:
    started = time.monotonic()
    usage_before = service.usage()
    played = [(task_id, task) for task_id, task in tasks for _ in range(settings.group_size)]
    records = play_episodes(service, spec, played, settings, settings.sampling(), seed=_seed(settings, "sample", step))
    groups: dict[str, list[EpisodeRecord]] = {}
    for record in records:
        groups.setdefault(record.task_id, []).append(record)
    groups = {task_id: _with_advantages(group, settings.scale_by_std) for task_id, group in groups.items()}
    data: list[Datum] = []
    for group in groups.values():
        for record in group:
            if record.advantage and record.trajectory is not None:
                data.append(record.trajectory.datum(record.advantage))
    loss = kl = weights = state = None
    if data:
        outcome = service.forward_backward(data, settings.loss)
        service.optim_step(settings.adam)
        weights = service.save_weights_for_sampler(f"step-{step}")
        loss, kl = outcome.loss, sampler_kl(data, outcome.trainer_logprobs)
    if settings.save_state_every and step % settings.save_state_every == 0:
        state = service.save_state(f"step-{step}")
    # Every episode the policy is to blame for: one that errored without a result (a non-finite reward) still counts
    # in error_share; the reward figures skip it (episode_fields reads only results).
    blamed = [[record for record in group if not record.infrastructure_failure] for group in groups.values()]
    usage = service.usage()
    return StepReport(
        step=step,
        groups=groups,
        fields=episode_fields(blamed),
        signal_health=compute_signal_health([[r.result for r in group if r.result is not None] for group in blamed]),
        infra_failed=sum(1 for record in records if record.infrastructure_failure),
        trained_episodes=len(data),
        loss=loss,
        sampler_kl=kl,
        usage=TokenUsage(
            usage.prefill - usage_before.prefill, usage.sample - usage_before.sample, usage.train - usage_before.train
        ),
        seconds=time.monotonic() - started,
        sampler_weights=weights,
        state=state,
    )


def evaluate(
    service: TrainingService,
    spec: EnvironmentSpec,
    tasks: Mapping[str, Task],
    settings: LoopSettings,
    *,
    step: int,
) -> Evaluation:
    sampling = SamplingParams(max_tokens=settings.max_tokens, temperature=settings.eval_temperature)
    records = play_episodes(service, spec, list(tasks.items()), settings, sampling, seed=_seed(settings, "eval", step))
    episodes = {record.task_id: record for record in records}
    return Evaluation(
        step=step,
        episodes=episodes,
        fields=episode_fields([[record] for record in records if not record.infrastructure_failure]),
        infra_failed=sum(1 for record in records if record.infrastructure_failure),
    )


def play_episodes(
    service: TrainingService,
    spec: EnvironmentSpec,
    tasks: Sequence[tuple[str, Task]],
    settings: LoopSettings,
    sampling: SamplingParams,
    *,
    seed: int,
) -> list[EpisodeRecord]:
    """One episode per entry of ``tasks``, all advanced together by the driver, each environment made fresh and
    closed by the driver (or here, when making a later one fails)."""
    envs: list[Environment] = []
    try:
        envs = [spec.make(**dict(settings.env_args)) for _ in tasks]
    except BaseException:
        for env in envs:
            close_environment(env)
        raise
    policy = TokenPolicy(service, sampling, seed=seed)
    rules = spec.rules(timeout_s=settings.episode_timeout_s, max_turns=settings.max_turns)
    rollouts = play_batch(envs, [task for _, task in tasks], policy, rules)
    return [
        EpisodeRecord(
            task_id=task_id,
            rollout=rollout,
            trajectory=policy.trajectories.get(index),
            infrastructure_failure=is_infrastructure_failure(rollout),
        )
        for index, ((task_id, _), rollout) in enumerate(zip(tasks, rollouts, strict=True))
    ]


def _with_advantages(group: list[EpisodeRecord], scale_by_std: bool) -> list[EpisodeRecord]:
    trainable = [index for index, record in enumerate(group) if record.scored and record.trajectory is not None]
    rewards = [float(group[index].rollout.reward or 0.0) for index in trainable]  # scored: the reward is set
    advantages = dict(zip(trainable, group_advantages(rewards, scale_by_std=scale_by_std), strict=True))
    return [replace(record, advantage=advantages.get(index)) for index, record in enumerate(group)]


def _rng(seed: int, purpose: str, step: int) -> random.Random:
    return random.Random(f"{seed}/{purpose}/{step}")  # noqa: S311 - seeds, not secrets; a str seed is hashed (SHA-512): stable across processes


def _seed(settings: LoopSettings, purpose: str, step: int) -> int:
    return _rng(settings.seed, purpose, step).getrandbits(48)
