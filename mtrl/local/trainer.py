"""GRPO on the CPU: several rollouts per task, advantage = (reward − group mean) / group std.

Training advances in chunks (``advance``) and its whole state — policy, optimiser moments, random
generator, history — is a JSON document, so the same run can be driven in one go (``mtrl env try``) or a
few steps per poll by a Lambda handler, with identical results for the same seed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from mtrl.contracts.environment import EpisodeResult
from mtrl.envs.registry import EnvironmentSpec
from mtrl.envs.rollout import Message, play
from mtrl.envs.rollout import Rollout as Played
from mtrl.health.emf import EpisodeMetrics
from mtrl.health.episodes import episode_fields
from mtrl.health.evaluation import figures as evaluation_figures
from mtrl.health.signal_health import compute as compute_signal_health
from mtrl.local.agents import Agent, EpisodeAgent
from mtrl.local.config import TrainConfig
from mtrl.local.policy import Adam, FloatArray, LogLinearPolicy

Task = Mapping[str, Any]  # one dataset row's ``metadata``


class TrainingError(RuntimeError):
    """Training cannot go on (the message says why in plain words)."""


@dataclass
class Rollout:
    result: EpisodeResult
    grad_log_prob: FloatArray  # Σ_t ∇θ log π(a_t | s_t) over the episode
    turns: int
    hit_turn_limit: bool = False  # the episode used every turn it was allowed (mtrl.health.episodes)
    status: Literal["completed"] = "completed"  # an environment error aborts training (mtrl.health.episodes)
    episode: Played | None = None  # the driver's record of the episode (messages, end reason)


@dataclass
class TrainingState:
    """Everything needed to resume a run exactly where it stopped."""

    config: TrainConfig
    policy: LogLinearPolicy
    optimiser: Adam
    rng_state: dict[str, Any]
    step: int = 0
    phase: str = "before"  # before → training → after → done
    history: list[dict[str, Any]] = field(default_factory=list)  # one record per GRPO step
    evaluations: list[dict[str, Any]] = field(default_factory=list)  # held-out evaluations, step 0 first
    train_seconds: float = 0.0
    # The checkpoint of the best held-out evaluation during training (step >= 1): {"step", "evaluation_mean",
    # "policy"}; kept so a run stopped early (early_stop) still has it, next to the latest policy.
    best: dict[str, Any] | None = None

    @property
    def done(self) -> bool:
        return self.phase == "done"

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "policy": self.policy.to_dict(),
            "optimiser": self.optimiser.to_dict(),
            "rng_state": self.rng_state,
            "step": self.step,
            "phase": self.phase,
            "history": self.history,
            "evaluations": self.evaluations,
            "train_seconds": self.train_seconds,
            "best": self.best,
        }

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> TrainingState:
        config_doc = dict(document["config"])
        return cls(
            config=TrainConfig(**config_doc),
            policy=LogLinearPolicy.from_dict(document["policy"]),
            optimiser=Adam.from_dict(document["optimiser"]),
            rng_state=document["rng_state"],
            step=int(document["step"]),
            phase=str(document["phase"]),
            history=list(document["history"]),
            evaluations=list(document["evaluations"]),
            train_seconds=float(document["train_seconds"]),
            best=document.get("best"),  # (a state saved before best checkpoints were kept has none)
        )

    def keep_if_best(self, evaluation: Mapping[str, Any]) -> None:
        """Keep the current policy as the best checkpoint when this evaluation beats every earlier one."""
        value = evaluation.get("evaluation_mean")
        if not isinstance(value, int | float) or not math.isfinite(value) or self.step < 1:
            return
        if self.best is None or value > float(self.best["evaluation_mean"]):
            self.best = {"step": self.step, "evaluation_mean": float(value), "policy": self.policy.to_dict()}


def new_state(config: TrainConfig, agent: Agent) -> TrainingState:
    rng = np.random.default_rng(config.seed)
    return TrainingState(
        config=config,
        policy=LogLinearPolicy(agent.feature_names),
        optimiser=Adam(learning_rate=config.learning_rate),
        rng_state=dict(rng.bit_generator.state),
    )


@dataclass(frozen=True)
class TaskSplit:
    train: Sequence[Task]
    holdout: Sequence[Task]

    @classmethod
    def from_rows(
        cls, train_rows: Sequence[Task], eval_rows: Sequence[Task] | None, *, holdout_fraction: float, seed: int
    ) -> TaskSplit:
        """Use the run's evaluation split when it has one, else hold out a seeded fraction of the training rows."""
        if eval_rows:
            return cls(train=list(train_rows), holdout=list(eval_rows))
        if len(train_rows) < 2:
            raise TrainingError("the dataset needs at least 2 rows to hold some out for evaluation")
        order = np.random.default_rng([seed, 7]).permutation(len(train_rows))
        n_holdout = min(len(train_rows) - 1, max(1, round(len(train_rows) * holdout_fraction)))
        return cls(
            train=[train_rows[i] for i in order[n_holdout:]],
            holdout=[train_rows[i] for i in order[:n_holdout]],
        )


class Trainer:
    """Plays episodes of one environment with one agent and updates the policy with GRPO."""

    def __init__(
        self, spec: EnvironmentSpec, agent: Agent, tasks: TaskSplit, *, env_args: Mapping[str, Any] | None = None
    ) -> None:
        if not tasks.train or not tasks.holdout:
            raise TrainingError("training needs at least one training task and one held-out task")
        self.spec = spec
        self.agent = agent
        self.tasks = tasks
        self.env_args = dict(env_args or {})
        self.metrics: EpisodeMetrics | None = None  # the environment-side EMF of each step's groups, when set

    def rollout(
        self, policy: LogLinearPolicy, task: Task, rng: np.random.Generator, *, greedy: bool = False
    ) -> Rollout:
        """One episode through the one episode driver, the agent proposing the actions the policy picks from."""
        grad = np.zeros(policy.theta.size)
        episode: EpisodeAgent | None = None
        last_action = ""

        def act(messages: list[Message], *, timeout_s: float | None) -> str:
            nonlocal episode, grad, last_action
            if episode is None:
                episode = self.agent.start(task, messages[-1]["content"], rng)
            else:
                episode.observe(last_action, messages[-1]["content"])
            actions, features = episode.options()
            decision = policy.decide(features, rng, greedy=greedy)
            grad += decision.grad_log_prob
            last_action = actions[decision.index]
            return last_action

        # The agent may stop sooner than the environment (its hard stop), never later.
        played = play(self.spec.make(**self.env_args), task, act, self.spec.rules(max_turns=self.agent.max_turns))
        played.raise_error()
        assert played.result is not None  # no error: result() returned
        return Rollout(
            result=played.result,
            grad_log_prob=grad,
            turns=played.turns,
            hit_turn_limit=played.hit_turn_limit,
            episode=played,
        )

    def heldout_rollouts(self, policy: LogLinearPolicy, *, config: TrainConfig) -> list[Rollout]:
        """One rollout of each of the first ``eval_tasks`` held-out tasks, from the fixed evaluation seed."""
        rng = np.random.default_rng([config.seed, 1])
        tasks = list(self.tasks.holdout)[: config.eval_tasks]
        return [self.rollout(policy, task, rng, greedy=config.greedy_eval) for task in tasks]

    def evaluate(self, policy: LogLinearPolicy, *, step: int, config: TrainConfig) -> dict[str, Any]:
        """Held-out external evaluation (``mtrl.health.evaluation``), success, reward and component means at ``step``.

        The evaluation is reported next to the reward, never mixed into it. The evaluation generator is
        re-seeded identically every time, so before/after differ only by policy.
        """
        results = self.heldout_rollouts(policy, config=config)
        return {
            "step": step,
            "tasks": len(results),
            **evaluation_figures([r.result for r in results]),
            "success_rate": _mean([1.0 if r.result.success else 0.0 for r in results]),
            "reward_mean": _mean([r.result.reward for r in results]),
            "components": _component_means([r.result for r in results]),
            "mean_turns": _mean([float(r.turns) for r in results]),
        }

    def train_step(self, state: TrainingState, rng: np.random.Generator) -> dict[str, Any]:
        config = state.config
        started = time.perf_counter()
        picks = rng.choice(len(self.tasks.train), size=min(config.tasks_per_step, len(self.tasks.train)), replace=False)
        groups: list[list[Rollout]] = []
        for index in picks:
            task = self.tasks.train[int(index)]
            groups.append([self.rollout(state.policy, task, rng) for _ in range(config.group_size)])
        if self.metrics is not None:
            self.metrics.publish(groups)
        gradient = np.zeros(state.policy.theta.size)
        informative = 0
        for group in groups:
            rewards = np.array([r.result.reward for r in group])
            spread = float(rewards.std())
            if spread < 1e-9:
                continue  # every rollout scored the same: GRPO has nothing to learn from this group
            informative += 1
            advantages = (rewards - rewards.mean()) / (spread + 1e-6)
            for advantage, rollout in zip(advantages, group, strict=True):
                gradient += advantage * rollout.grad_log_prob
        episodes = sum(len(group) for group in groups)
        gradient /= episodes
        if np.any(gradient):
            state.policy.theta = state.optimiser.ascend(state.policy.theta, gradient)
        flat = [r.result for group in groups for r in group]
        return {
            "step": state.step + 1,
            "episodes": episodes,
            "reward_mean": _mean([r.reward for r in flat]),
            "success_rate": _mean([1.0 if r.success else 0.0 for r in flat]),
            "components": _component_means(flat),
            "metrics": _metric_means(flat),
            **_signal_health([[r.result for r in group] for group in groups]),
            "episode_signals": episode_fields(groups),
            "informative_groups": informative,
            "grad_norm": float(np.linalg.norm(gradient)),
            "seconds": round(time.perf_counter() - started, 4),
        }

    def advance(
        self,
        state: TrainingState,
        *,
        time_budget_s: float | None = None,
        max_steps: int | None = None,
        on_step: Callable[[TrainingState, dict[str, Any]], None] | None = None,
    ) -> TrainingState:
        """Run evaluations and GRPO steps until done, out of time, or ``max_steps`` steps were taken.

        At least one unit of work (an evaluation or a step) is always done, so every call makes progress.
        """
        config = state.config
        deadline = None if time_budget_s is None else time.monotonic() + time_budget_s
        rng = np.random.default_rng()
        rng.bit_generator.state = state.rng_state
        taken = 0
        started = time.perf_counter()
        try:
            while not state.done:
                if state.phase == "before":
                    state.evaluations.append(self.evaluate(state.policy, step=0, config=config))
                    state.phase = "training" if config.steps > 0 else "after"
                elif state.phase == "training":
                    record = self.train_step(state, rng)
                    state.step += 1
                    state.history.append(record)
                    taken += 1
                    if on_step is not None:
                        on_step(state, record)
                    if state.step >= config.steps:
                        state.phase = "after"
                    elif state.step % config.eval_every == 0:
                        state.evaluations.append(self.evaluate(state.policy, step=state.step, config=config))
                        state.keep_if_best(state.evaluations[-1])
                elif state.phase == "after":
                    state.evaluations.append(self.evaluate(state.policy, step=state.step, config=config))
                    state.keep_if_best(state.evaluations[-1])
                    state.phase = "done"
                else:
                    raise TrainingError(f"unknown training phase '{state.phase}'")
                if (max_steps is not None and taken >= max_steps) or (
                    deadline is not None and time.monotonic() >= deadline
                ):
                    break
        finally:
            state.rng_state = dict(rng.bit_generator.state)
            state.train_seconds += time.perf_counter() - started
        return state


def _signal_health(groups: list[list[EpisodeResult]]) -> dict[str, Any]:
    """Per component (the aggregate ``reward`` first): within-group spread, zero-spread share and mean."""
    report = compute_signal_health(groups)
    health = {
        item.name: {"mean_spread": item.mean_spread, "zero_spread_share": item.zero_spread_share, "mean": item.mean}
        for item in [report.aggregate, *report.components.values()]
    }
    return {"signal_health": health, "signal_warnings": list(report.warnings)}


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if values else math.nan


def _component_means(results: Sequence[EpisodeResult]) -> dict[str, float]:
    names = sorted({name for r in results for name in r.components})
    return {name: _mean([r.components.get(name, 0.0) for r in results]) for name in names}


def _metric_means(results: Sequence[EpisodeResult]) -> dict[str, float]:
    names = sorted({name for r in results for name in r.metrics})
    return {name: _mean([r.metrics[name] for r in results if name in r.metrics]) for name in names}
