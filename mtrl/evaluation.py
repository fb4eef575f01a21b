"""The external evaluation of episodes, reported next to — never mixed into — the training reward (seed 001).

An environment that declares ``EVALUATION`` sets ``EpisodeResult.evaluation`` (in [0, 1]) on every result; that is
the score. One that declares none is scored by its own ``success`` (1 or 0), and every report says so: the
``measure`` of a figure is ``"evaluation"`` or ``"success"``. Every place that reports held-out figures (the local
trainer, ``mtrl env try``, ``mtrl eval``, the run summary) uses these functions, so the fallback is one rule.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from mtrl.envs.contract import EpisodeResult
from mtrl.envs.registry import EnvironmentSpec

EVALUATION = "evaluation"
SUCCESS = "success"
SUCCESS_FALLBACK = "success (the environment declares no EVALUATION)"


def score(result: EpisodeResult) -> float:
    """The episode's external evaluation, or its success (1/0) when the environment declares none."""
    if result.evaluation is not None:
        return float(result.evaluation)
    return 1.0 if result.success else 0.0


def measure_of(results: Iterable[EpisodeResult]) -> str:
    """``"evaluation"`` when every result carries one, else ``"success"`` (the fallback, labelled as such)."""
    found = list(results)
    return EVALUATION if found and all(r.evaluation is not None for r in found) else SUCCESS


def describe(spec: EnvironmentSpec) -> dict[str, str]:
    """What the evaluation of ``spec`` measures: ``{"measure", "description"}`` for reports."""
    declared = spec.evaluation
    if declared is None:
        return {"measure": SUCCESS, "description": SUCCESS_FALLBACK}
    return {"measure": EVALUATION, "description": declared}


def figures(results: Sequence[EpisodeResult]) -> dict[str, Any]:
    """``evaluation_mean`` (the score above, averaged) and the ``evaluation_measure`` it stands for."""
    values = [score(r) for r in results]
    return {
        "evaluation_mean": sum(values) / len(values) if values else math.nan,
        "evaluation_measure": measure_of(results),
    }


def label(measure: str | None) -> str:
    """How a report names a held-out score: the external evaluation, or success as the labelled fallback."""
    return "evaluation" if measure == EVALUATION else "evaluation (= success: no EVALUATION declared)"
