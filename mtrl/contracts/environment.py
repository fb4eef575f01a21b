"""The plug-in contract every reward environment (built-in or custom) implements.

An environment package ``environments/<env_id>/`` (or ``custom-environments/<env_id>/``) has a
dependency-free core and exposes, at module level:

- ``ENV_ID: str`` — equal to the directory name;
- ``DESCRIPTION: str`` — one line for ``mtrl env list``;
- ``make_env(**kwargs) -> Environment`` — a fresh episode object (one per rollout, never shared);
- ``validate_task(metadata: dict) -> list[str]`` — problems with one dataset row's ``metadata``
  (empty list = valid); the pipeline's dataset validator calls it for every row;
- ``EXAMPLE_TASK: dict`` and ``EXAMPLE_ACTIONS: list[str]`` — one episode the registry plays as a
  smoke test (at synth for custom environments, and in tests);
- ``load_environment(**kwargs)`` — the ``verifiers``-style entry point for the Nova Forge path; it is
  the only place allowed to import ``verifiers``;
- ``MAX_TURNS: int`` (optional, default ``DEFAULT_MAX_TURNS``) — the most actions an episode may take; every
  driver stops there (``mtrl.envs.rollout``), so ``env try`` plays the same number of turns as training;
- ``SYSTEM_PROMPT: str`` (optional, default ``DEFAULT_SYSTEM_PROMPT``) — the system message every policy is given;
- ``EVALUATION: str`` (optional) — one line naming the environment's external evaluation (for example
  "exact match of the final JSON answer"); an environment that declares it must set
  ``EpisodeResult.evaluation`` on every result.

An ``Environment`` is driven as ``reset(task) -> observation``, then ``step(action)`` until
``done`` (or the turn limit), then ``result()`` — by the one episode driver, ``mtrl.envs.rollout``. ``step``
turns any string into an observation (a malformed action is an observation saying so, never an exception).
``task`` is a dataset row's ``metadata`` object (``{"prompt": ..., "answer"?: ..., "task"?: ..., "info"?: ...}``).

An environment that holds resources (an episode database, temporary files, a child process; see
``mtrl.envs.episode_state``) also defines ``close()``: it releases them and is idempotent. It is optional
(not part of the ``Environment`` protocol, so existing environments stay valid); every driver calls it
through ``close_environment`` or ``closing`` in a ``finally``, after ``result()``, whether the episode
ended normally, ran out of turns or time, or raised.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

MetricType = Literal["Reward", "Metric"]

# What an environment that declares no ``MAX_TURNS`` / ``SYSTEM_PROMPT`` is played with.
DEFAULT_MAX_TURNS = 16
DEFAULT_SYSTEM_PROMPT = "You are solving an interactive task. Reply with your next action only, no explanation."
MAX_TURNS_CEILING = 1000  # a declared limit above this is a typo, not a game
# ``EpisodeResult.metrics`` key every environment fills: how many of the episode's actions (tool calls, moves or the
# final answer) could not be parsed or used at all. Training health counts the episodes where it is above 0
# (``malformed_share``), so a policy drifting into broken tool calls is seen while it trains.
MALFORMED_ACTIONS = "malformed_actions"


@dataclass(frozen=True)
class StepResult:
    """What the policy sees after one action."""

    observation: str
    done: bool


@dataclass(frozen=True)
class EpisodeResult:
    """The scored outcome of one episode.

    ``reward`` is the aggregate used for training; ``components`` are the named, already weighted or
    unweighted parts the environment wants watched (each one is reported separately so a component
    that never varies inside a group can be spotted); ``metrics`` are diagnostics that are not reward.
    ``metrics[MALFORMED_ACTIONS]`` (``"malformed_actions"``) counts the actions that could not be parsed or
    used (every built-in environment reports it; training health watches the share of episodes with any).

    ``evaluation`` is the external evaluation of the episode, in [0, 1] (the SageMaker AI multi-turn RL best-practices
    post: evaluate first, and separately from the reward — the reward may be shaped or dense, the evaluation is what the
    task owner would accept as solved). ``None`` when the environment declares no evaluation.
    """

    reward: float
    components: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    success: bool = False
    evaluation: float | None = None

    def metrics_list(self) -> list[dict[str, Any]]:
        """Nova Forge ``metrics_list`` entries: the aggregate, each component, then each metric."""
        entries: list[dict[str, Any]] = [{"name": "reward", "value": self.reward, "type": "Reward"}]
        entries += [{"name": name, "value": value, "type": "Reward"} for name, value in self.components.items()]
        entries += [{"name": name, "value": value, "type": "Metric"} for name, value in self.metrics.items()]
        entries.append({"name": "success", "value": 1.0 if self.success else 0.0, "type": "Metric"})
        if self.evaluation is not None:
            entries.append({"name": "evaluation", "value": float(self.evaluation), "type": "Metric"})
        return entries

    def to_dict(self) -> dict[str, Any]:
        return {
            "reward": self.reward,
            "components": dict(self.components),
            "metrics": dict(self.metrics),
            "success": self.success,
            "evaluation": self.evaluation,
            "metrics_list": self.metrics_list(),
        }

    def problems(self) -> list[str]:
        """Contract violations (non-finite numbers, bad names); empty when the result is well formed.

        A number is any real (numpy scalars included) that converts to a finite float: NaN, ±inf and integers too
        large for a float are violations, and so are booleans and strings.
        """
        found: list[str] = []
        if not _finite_number(self.reward):
            found.append(f"reward must be a finite number (got {_shown(self.reward)})")
        if self.evaluation is not None and (
            not _finite_number(self.evaluation) or not 0.0 <= float(self.evaluation) <= 1.0
        ):
            found.append(f"evaluation must be a number in [0, 1] or None (got {_shown(self.evaluation)})")
        for kind, values in (("component", self.components), ("metric", self.metrics)):
            if not isinstance(values, Mapping):
                found.append(f"{kind}s must be a mapping of name to number (got {type(values).__name__})")
                continue
            for name, value in values.items():
                if not isinstance(name, str) or not name:
                    found.append(f"{kind} name must be a non-empty string (got {_shown(name)})")
                if not _finite_number(value):
                    found.append(f"{kind} '{str(name)[:60]}' must be a finite number (got {_shown(value)})")
        return found


def _finite_number(value: object) -> bool:
    """A real number (not a bool) that converts to a finite float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    try:
        return math.isfinite(float(value))
    except (OverflowError, ValueError, TypeError):
        return False


def _shown(value: object) -> str:
    """``repr`` bounded (a hostile value may be huge), and never raising."""
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__, or an int past Python's 4300-digit conversion limit
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


@runtime_checkable
class Environment(Protocol):
    """One episode of a multi-turn task. Instances are single-use and not thread-safe."""

    def reset(self, task: Mapping[str, Any]) -> str:
        """Start an episode for one dataset row's ``metadata``; returns the first observation."""
        ...

    def step(self, action: str) -> StepResult:
        """Apply one policy action (the assistant's text or tool argument)."""
        ...

    @property
    def done(self) -> bool: ...

    def result(self) -> EpisodeResult:
        """Score the episode; valid at any time (an unfinished episode is scored as it stands)."""
        ...


class TaskError(ValueError):
    """A task row the environment cannot start an episode from (the message names the problem)."""


def close_environment(env: object) -> None:
    """Call the environment's optional ``close()`` (nothing when it has none); drivers call it in ``finally``."""
    close = getattr(env, "close", None)
    if callable(close):
        close()


@contextlib.contextmanager
def closing(env: Environment) -> Iterator[Environment]:
    """``with closing(spec.make()) as env:`` — the episode's resources are released however the block ends."""
    try:
        yield env
    finally:
        close_environment(env)
