"""The external evaluation of episodes, reported next to — never mixed into — the training reward (the SageMaker AI
multi-turn RL best-practices post).

An environment that declares ``EVALUATION`` sets ``EpisodeResult.evaluation`` (in [0, 1]) on every result; that is
the score. One that declares none is scored by its own ``success`` (1 or 0), and every report says so: the
``measure`` of a figure is ``"evaluation"`` or ``"success"``. Every place that reports held-out figures (the local
trainer, ``mtrl env try``, ``mtrl eval``, the run summary) uses these functions, so the fallback is one rule.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from mtrl.health import emf_document as emf

if TYPE_CHECKING:  # (types only: `mtrl status` labels the evaluation without loading the environments)
    from mtrl.contracts.environment import EpisodeResult

EVALUATION = "evaluation"
SUCCESS = "success"
SUCCESS_FALLBACK = "success (the environment declares no EVALUATION)"
EMF_NAMESPACE = "mtrl/Evaluation"


class DeclaresEvaluation(Protocol):
    """What ``describe`` reads of an environment (``mtrl.envs.registry.EnvironmentSpec`` is one): its declared
    ``EVALUATION``, one line, or None. A protocol, so health depends on no environment code, even for typing."""

    @property
    def evaluation(self) -> str | None: ...


def score(result: EpisodeResult) -> float:
    """The episode's external evaluation, or its success (1/0) when the environment declares none."""
    if result.evaluation is not None:
        return float(result.evaluation)
    return 1.0 if result.success else 0.0


def measure_of(results: Iterable[EpisodeResult]) -> str:
    """``"evaluation"`` when every result carries one, else ``"success"`` (the fallback, labelled as such)."""
    found = list(results)
    return EVALUATION if found and all(r.evaluation is not None for r in found) else SUCCESS


def describe(spec: DeclaresEvaluation) -> dict[str, str]:
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


def emit_emf(
    results: Sequence[EpisodeResult],
    *,
    dimensions: Mapping[str, str],
    stream: TextIO | None = None,
    timestamp_ms: int | None = None,
) -> bool:
    """One CloudWatch EMF line: the external evaluation mean of these episodes (``EvaluationMean``, dimension
    ``Measure`` = evaluation | success) next to their reward mean — the pair that shows a reward rising while the task
    success falls (the SageMaker AI multi-turn RL best-practices post's anti-pattern). Nothing is written for no
    episodes; returns whether it wrote."""
    if not results:
        return False
    found = figures(results)
    line = emf.document(
        namespace=EMF_NAMESPACE,
        dimensions={**dimensions, "Measure": found["evaluation_measure"]},
        metrics=[
            ("EvaluationMean", found["evaluation_mean"], "None"),
            ("RewardMean", sum(r.reward for r in results) / len(results), "None"),
            ("Episodes", len(results), "Count"),
        ],
        timestamp_ms=timestamp_ms,
    )
    emf.write([line], stream)
    return True
