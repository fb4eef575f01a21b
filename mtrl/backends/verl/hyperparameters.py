"""The hyperparameters a verl run's manifest may set, checked at Register (the descriptor's ``manifest_check``),
before anything is provisioned.

Every value reaches the trainer as a Hydra override (``verl.trainer.main_ppo``), where a string is grammar: a
``${oc.env:NAME}`` interpolation reads the pod's environment (and verl prints the resolved config to the job log), a
``{_target_: …}`` mapping is instantiated by verl's config validation. So a manifest names only the hyperparameters
verl's mapping knows, each a number of its documented range: strings never reach an override from a manifest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class NumberRange:
    """A number in ``(low, high]`` (``low_inclusive``: ``[low, high]``)."""

    override: str  # the verl config key it sets
    low: float
    high: float
    low_inclusive: bool = False

    def problem(self, value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"must be a number, not {type(value).__name__} {value!r}"
        if not math.isfinite(value):
            return "must be finite"
        above_low = value >= self.low if self.low_inclusive else value > self.low
        if not (above_low and value <= self.high):
            opening = "[" if self.low_inclusive else "("
            return f"must be in {opening}{self.low:g}, {self.high:g}] (got {value:g})"
        return None


# name → what it sets in verl's config (verl/trainer/config/actor/actor.yaml: optim.lr).
VERL_HYPERPARAMETERS: dict[str, NumberRange] = {
    "learning_rate": NumberRange("actor_rollout_ref.actor.optim.lr", 0.0, 1.0),
}


def hyperparameter_problems(values: Mapping[str, Any]) -> list[str]:
    problems = []
    for name in sorted(values):
        accepted = VERL_HYPERPARAMETERS.get(name)
        if accepted is None:
            known = ", ".join(sorted(VERL_HYPERPARAMETERS))
            problems.append(f"hyperparameter '{name}' is not one the verl backend takes (it takes: {known})")
            continue
        problem = accepted.problem(values[name])
        if problem:
            problems.append(f"hyperparameter '{name}' {problem}")
    return problems


def run_hyperparameter_problems(settings: Any) -> list[str]:
    """A resolved run's hyperparameters (the descriptor's ``manifest_check``)."""
    return hyperparameter_problems(settings.hyperparameters)
