"""The reward-worker runtime: pull rollout requests, play episodes against the policy, publish scores.

Used by the ``hyperpod`` backend's ECS reward workers (``python -m mtrl.worker``). Transport is pluggable
(``RolloutSource`` / ``ResultSink``; SQS implementations in ``mtrl.worker.transport``) and so is the policy
(``Policy``: chat messages in, the assistant's next action out). Episodes are played by the one episode driver
(``mtrl.envs.rollout``): the environment's own turn limit and system prompt, chat roles, the string contract.

Guarantees:
- bounded concurrency: at most ``concurrency`` episodes run at once, and no more requests are taken than
  can start (the rest stay in the queue for other workers);
- per-episode timeout: the policy gets only the time left, the episode stops between turns at the deadline
  (an action that arrives after it is not applied) and is scored as it stands (status ``timeout``);
- a bad episode (environment or policy error) is published with status ``error`` and a low reward — it
  never stops the worker;
- graceful shutdown (SIGTERM): stop taking requests, let running episodes finish for ``grace_s``, then
  abandon the rest: they are released back to the queue unpublished. Each result is published as one
  message before its request is acknowledged, so nothing is ever half-written and an abandoned rollout is
  replayed elsewhere;
- signal health: per group of rollouts of the same task, published as CloudWatch EMF log lines by the one
  environment-side metrics writer (``mtrl.health.emf``): spread per component, the external evaluation beside the
  reward, and the episode shares (malformed actions, turn-limit hits, turns, errors, timeouts).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Literal, Protocol, TextIO

from mtrl.contracts.environment import EpisodeResult
from mtrl.envs.registry import EnvironmentSpec
from mtrl.envs.rollout import play
from mtrl.health.emf import EpisodeMetrics

log = logging.getLogger("mtrl.worker")

OutcomeStatus = Literal["completed", "timeout", "error"]


@dataclass(frozen=True)
class RolloutRequest:
    rollout_id: str
    group_id: str  # rollouts of the same task form a GRPO group
    task: dict[str, Any]  # the dataset row's metadata
    receipt: Any = None  # transport handle (e.g. an SQS receipt handle)


@dataclass(frozen=True)
class RolloutOutcome:
    rollout_id: str
    group_id: str
    status: OutcomeStatus
    reward: float
    result: EpisodeResult | None
    transcript: list[dict[str, str]] = field(default_factory=list)
    error: str = ""
    duration_s: float = 0.0
    turns: int = 0  # actions played
    hit_turn_limit: bool = False  # the episode used every turn the environment allows

    def to_message(self) -> dict[str, Any]:
        """The published result: Nova Forge's ``aggregate_reward_score`` / ``metrics_list`` plus status."""
        return {
            "id": self.rollout_id,
            "group_id": self.group_id,
            "status": self.status,
            "aggregate_reward_score": self.reward,
            "metrics_list": self.result.metrics_list() if self.result else [],
            "error": self.error,
            "duration_s": round(self.duration_s, 3),
            "messages": self.transcript,
        }


class RolloutSource(Protocol):
    def receive(self, max_count: int, wait_s: float) -> list[RolloutRequest]: ...

    def ack(self, request: RolloutRequest) -> None: ...

    def release(self, request: RolloutRequest) -> None: ...


class ResultSink(Protocol):
    def publish(self, outcome: RolloutOutcome) -> None: ...


class Policy(Protocol):
    def act(self, messages: list[dict[str, str]], *, timeout_s: float) -> str: ...


@dataclass(frozen=True)
class WorkerConfig:
    concurrency: int = 4
    episode_timeout_s: float = 300.0
    max_turns: int | None = None  # lower than the environment's MAX_TURNS only for a quick dry run; None: its own
    grace_s: float = 25.0  # below ECS's default 30 s stop timeout
    receive_wait_s: float = 1.0
    error_reward: float = -1.0  # only when the environment cannot even score the failed episode
    group_size: int = 8
    health_every_groups: int = 8
    health_dimensions: Mapping[str, str] = field(default_factory=dict)
    env_args: Mapping[str, Any] = field(default_factory=dict)  # keyword arguments of the environment's make_env

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.group_size < 1 or self.health_every_groups < 1:
            raise ValueError("concurrency, group_size and health_every_groups must be at least 1")
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        if self.episode_timeout_s <= 0 or self.grace_s < 0 or self.receive_wait_s < 0:
            raise ValueError("episode_timeout_s must be positive; grace_s and receive_wait_s not negative")


def play_episode(
    spec: EnvironmentSpec, request: RolloutRequest, policy: Policy, config: WorkerConfig
) -> RolloutOutcome:
    """Run one episode to completion, timeout or error through the one episode driver; never raises."""
    started = time.monotonic()
    try:
        problems = spec.validate_task(request.task)
        if problems:
            raise ValueError("invalid task: " + "; ".join(problems))
        env = spec.make(**config.env_args)
    except Exception as failure:  # a bad episode is a low reward, never a dead worker
        return RolloutOutcome(
            rollout_id=request.rollout_id,
            group_id=request.group_id,
            status="error",
            reward=config.error_reward,
            result=None,
            error=f"{type(failure).__name__}: {failure}",
            duration_s=time.monotonic() - started,
        )
    rules = spec.rules(timeout_s=config.episode_timeout_s, max_turns=config.max_turns)

    def act(messages: list[dict[str, str]], *, timeout_s: float | None) -> str:
        return policy.act(messages, timeout_s=config.episode_timeout_s if timeout_s is None else timeout_s)

    rollout = play(env, request.task, act, rules)
    error = rollout.error_text
    if rollout.status == "timeout":
        error = f"episode exceeded {config.episode_timeout_s:g} s"
    return RolloutOutcome(
        rollout_id=request.rollout_id,
        group_id=request.group_id,
        status=rollout.status,
        reward=rollout.reward if rollout.reward is not None else config.error_reward,
        result=rollout.result,
        transcript=rollout.transcript,
        error=error,
        duration_s=time.monotonic() - started,
        turns=rollout.turns,
        hit_turn_limit=rollout.hit_turn_limit,
    )


class WorkerRuntime:
    """Bounded-concurrency episode loop with graceful shutdown. ``run()`` blocks until shut down."""

    def __init__(
        self,
        spec: EnvironmentSpec,
        source: RolloutSource,
        sink: ResultSink,
        policy: Policy,
        config: WorkerConfig | None = None,
        *,
        health_stream: TextIO | None = None,
    ) -> None:
        self.spec = spec
        self.source = source
        self.sink = sink
        self.policy = policy
        self.config = config or WorkerConfig()
        self.health_stream = health_stream
        self._metrics = EpisodeMetrics(self.spec.env_id, dimensions=self.config.health_dimensions, stream=health_stream)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._state: dict[str, str] = {}  # rollout id -> running | publishing | abandoned
        self._groups: dict[str, list[RolloutOutcome]] = {}
        self._full_groups: list[list[RolloutOutcome]] = []
        self.published = 0
        self.abandoned = 0

    def request_shutdown(self, *_: object) -> None:
        if not self._stop.is_set():
            log.info("shutdown requested: no new rollouts; finishing running episodes")
        self._stop.set()

    def install_signal_handlers(self) -> None:
        def handler(signum: int, _frame: FrameType | None) -> None:
            self.request_shutdown()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def run(self) -> None:
        running: dict[str, tuple[Future[None], RolloutRequest]] = {}
        pool = ThreadPoolExecutor(max_workers=self.config.concurrency, thread_name_prefix="episode")
        try:
            while not self._stop.is_set():
                for rollout_id in [rid for rid, (future, _) in running.items() if future.done()]:
                    del running[rollout_id]
                free = self.config.concurrency - len(running)
                if free <= 0:
                    self._stop.wait(0.01)
                    continue
                try:
                    requests = self.source.receive(free, self.config.receive_wait_s)
                except Exception:  # transport hiccup: log and keep serving
                    log.exception("receiving rollout requests failed")
                    self._stop.wait(1.0)
                    continue
                for request in requests:
                    if self._stop.is_set():
                        self.source.release(request)
                        continue
                    with self._lock:
                        self._state[request.rollout_id] = "running"
                    running[request.rollout_id] = (pool.submit(self._serve, request), request)
            self._drain(running)
        finally:
            # Do not wait for abandoned episodes: they were released and will not publish.
            pool.shutdown(wait=False, cancel_futures=True)
        self._emit_health(final=True)

    def _drain(self, running: dict[str, tuple[Future[None], RolloutRequest]]) -> None:
        wait([future for future, _ in running.values()], timeout=self.config.grace_s)
        with self._lock:
            leftovers = [request for _, request in running.values() if self._state.get(request.rollout_id) == "running"]
            for request in leftovers:
                self._state[request.rollout_id] = "abandoned"
        for request in leftovers:
            self.abandoned += 1
            log.warning("abandoning rollout %s at shutdown; released for another worker", request.rollout_id)
            self.source.release(request)

    def _serve(self, request: RolloutRequest) -> None:
        outcome = play_episode(self.spec, request, self.policy, self.config)
        with self._lock:
            if self._state.get(request.rollout_id) == "abandoned":
                self._state.pop(request.rollout_id, None)
                return  # already released at shutdown: publishing now would duplicate it
            self._state[request.rollout_id] = "publishing"
        try:
            self.sink.publish(outcome)
            self.source.ack(request)
            self.published += 1
        except Exception:
            log.exception("publishing rollout %s failed; releasing it", request.rollout_id)
            self.source.release(request)
        finally:
            with self._lock:
                self._state.pop(request.rollout_id, None)
        if outcome.status != "completed":
            log.warning("rollout %s %s: %s", request.rollout_id, outcome.status, outcome.error)
        self._record(outcome)

    def _record(self, outcome: RolloutOutcome) -> None:
        with self._lock:
            group = self._groups.setdefault(outcome.group_id, [])
            group.append(outcome)
            if len(group) >= self.config.group_size:
                self._full_groups.append(self._groups.pop(outcome.group_id))
            ready = len(self._full_groups) >= self.config.health_every_groups
        if ready:
            self._emit_health(final=False)

    def _emit_health(self, *, final: bool) -> None:
        with self._lock:
            groups = self._full_groups
            self._full_groups = []
            if final:
                groups += [group for group in self._groups.values() if len(group) >= 2]
                self._groups = {}
        if not any(sum(o.result is not None for o in group) >= 2 for group in groups):
            return  # no group can show a spread yet
        self._metrics.publish(groups)
        for warning in self._metrics.warnings:
            log.warning("signal health: %s", warning)
