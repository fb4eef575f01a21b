"""The local backend's training configuration, read from a run's settings or the ``mtrl env try`` options.

``policy`` picks what is trained: ``features`` (a hand-made feature agent's log-linear policy, the three built-ins
only: fast, but not a language model) or ``hf:MODEL`` (a language model trained with TRL GRPO + LoRA, any
environment; ``hf:tiny-random`` is built in code, a local path is a saved model). The default is ``features``
where a feature agent exists, else ``hf:tiny-random``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any


class ConfigError(ValueError):
    """A training setting is missing or out of range (the message names the key)."""


# Defaults per environment: sized so a whole run (both evaluations included) fits the local budget of a few
# minutes on 2 cores while still clearly beating the untrained policy.
_ENV_DEFAULTS: dict[str, dict[str, Any]] = {
    "wordle": {"steps": 20, "tasks_per_step": 8, "group_size": 8, "learning_rate": 0.25, "eval_every": 5},
    "ask_to_code": {"steps": 20, "tasks_per_step": 6, "group_size": 8, "learning_rate": 0.2, "eval_every": 5},
    "sop_support": {"steps": 20, "tasks_per_step": 6, "group_size": 8, "learning_rate": 0.5, "eval_every": 5},
}
# A language-model run is a plumbing-sized dry run unless told otherwise: a few CPU GRPO steps of a small model.
_LM_DEFAULTS: dict[str, Any] = {
    "steps": 2,
    "tasks_per_step": 2,
    "group_size": 2,
    "learning_rate": 5e-4,
    "eval_every": 10_000,
    "eval_tasks": 4,
}
FEATURES = "features"
TINY_RANDOM_POLICY = "hf:tiny-random"


def default_policy(env_id: str) -> str:
    """``features`` for an environment with a feature agent, else the tiny language model."""
    from mtrl.local.agents import AGENTS  # noqa: PLC0415 - the agent table, not the agents

    return FEATURES if env_id in AGENTS else TINY_RANDOM_POLICY


@dataclass(frozen=True)
class TrainConfig:
    env_id: str
    env_args: dict[str, Any] = field(default_factory=dict)
    steps: int = 30
    tasks_per_step: int = 8  # distinct tasks per GRPO step
    group_size: int = 8  # rollouts per task; advantages are relative to this group
    learning_rate: float = 0.2
    seed: int = 0
    eval_every: int = 10  # steps between held-out evaluations (plus one before and one after)
    eval_tasks: int = 100  # at most this many held-out tasks are evaluated
    holdout_fraction: float = 0.2  # used only when the run has no separate evaluation split
    greedy_eval: bool = True  # evaluate the most likely action (ties at random) rather than a sample
    policy: str = FEATURES  # "features" or "hf:MODEL" (see the module docstring)
    max_new_tokens: int = 64  # language-model policy: tokens per reply
    max_turns: int = 0  # language-model policy: 0 plays the environment's MAX_TURNS; more only lowers it

    def __post_init__(self) -> None:
        checks: list[tuple[str, bool]] = [
            ("steps", 0 <= self.steps <= 10_000),
            ("tasks_per_step", 1 <= self.tasks_per_step <= 1_000),
            ("group_size", 2 <= self.group_size <= 256),
            ("learning_rate", 0 < self.learning_rate <= 10),
            ("eval_every", self.eval_every >= 1),
            ("eval_tasks", self.eval_tasks >= 1),
            ("holdout_fraction", 0 < self.holdout_fraction < 1),
            ("policy", self.policy == FEATURES or (self.policy.startswith("hf:") and len(self.policy) > 3)),
            ("max_new_tokens", 1 <= self.max_new_tokens <= 8192),
            ("max_turns", 0 <= self.max_turns <= 1_000),
        ]
        bad = [name for name, ok in checks if not ok]
        if bad:
            values = ", ".join(f"{name}={getattr(self, name)!r}" for name in bad)
            hint = " (group_size needs at least 2 rollouts)" if "group_size" in bad else ""
            if "policy" in bad:
                hint += " (policy is 'features' or 'hf:MODEL', e.g. 'hf:tiny-random' or 'hf:/path/to/model')"
            raise ConfigError(f"local backend settings out of range: {values}{hint}")

    @classmethod
    def from_mapping(
        cls, env_id: str, values: Mapping[str, Any], *, env_args: Mapping[str, Any] | None = None
    ) -> TrainConfig:
        """Environment defaults overlaid with ``values``; unknown keys are errors, never silently ignored."""
        known = {item.name for item in fields(cls)} - {"env_id", "env_args"}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(
                f"unknown local backend setting(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})"
            )
        policy = values.get("policy", default_policy(env_id))
        defaults = _ENV_DEFAULTS.get(env_id, {}) if policy == FEATURES else _LM_DEFAULTS
        merged: dict[str, Any] = {**defaults, **values, "policy": policy}
        types = {item.name: item.type for item in fields(cls)}
        coerced: dict[str, Any] = {}
        for key, value in merged.items():
            kind = types[key]
            try:
                if kind == "str":
                    if not isinstance(value, str):
                        raise TypeError
                    coerced[key] = value
                elif kind == "bool":
                    if not isinstance(value, bool):
                        raise TypeError
                    coerced[key] = value
                elif kind == "int":
                    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                        raise TypeError
                    coerced[key] = int(value)
                else:
                    if isinstance(value, bool):
                        raise TypeError
                    coerced[key] = float(value)
            except (TypeError, ValueError):
                raise ConfigError(f"local backend setting '{key}' must be a {kind} (got {value!r})") from None
        return cls(env_id=env_id, env_args=dict(env_args or {}), **coerced)

    @property
    def uses_language_model(self) -> bool:
        return self.policy != FEATURES

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
