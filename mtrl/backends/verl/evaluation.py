"""A verl run's held-out evaluation: the eval split played through the mtrl agent loop by verl's own validation.

verl validates with the same ``AgentLoopWorker`` and the same ``MtrlAgentLoop`` it trains with
(``RayPPOTrainer._validate``): before training when ``trainer.val_before_train`` is on (the run's
``baseline_evaluation``), and at the last step (``trainer.test_freq`` = the planned steps). It logs, per data source
(``mtrl/<env>``), the mean of every per-episode field the loop returns (``reward`` = the reward score; ``success``
and ``evaluation`` from ``reward_extra_info``) as ``val-core/…/reward/mean@N`` and ``val-aux/…/<field>/mean@N``.

The trainer (``mtrl.backends.verl.train``) writes what it saw to ``<run output>/evaluation.json``; the adapter's
``evaluate`` reads it back as the figures the local backend reports (``heldout_*_before`` / ``heldout_*_after``), so
the run summary shows the environment's evaluation next to the reward, with the same fallback to success
(``mtrl.health.evaluation``) for an environment that declares no ``EVALUATION``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from mtrl.health.evaluation import EVALUATION, SUCCESS

EVALUATION_FILE = "evaluation.json"
FIELDS = ("reward", "success", "evaluation")
_VALIDATION_METRIC = re.compile(
    r"^val-(?:core|aux)/mtrl/(?P<env>[^/]+)/(?P<field>reward|success|evaluation)/mean@(?P<n>\d+)$"
)


def validation_figures(metrics: Mapping[str, float]) -> dict[str, float] | None:
    """``{reward, success, evaluation}`` means of one verl validation (over all the run's samples per task: the
    largest ``N``); a field the episodes did not measure (NaN: no ``EVALUATION`` declared) is left out. None when
    ``metrics`` hold no validation of an mtrl environment."""
    best: dict[str, tuple[int, float]] = {}
    for name, value in metrics.items():
        found = _VALIDATION_METRIC.match(name)
        if found is None:
            continue
        field, samples = found.group("field"), int(found.group("n"))
        if field not in best or samples > best[field][0]:
            best[field] = (samples, float(value))
    if "reward" not in best:
        return None
    return {field: value for field, (_, value) in best.items() if math.isfinite(value)}


def is_validation_only(metrics: Mapping[str, float]) -> bool:
    """True for the line verl logs before training (step 0): validation figures and nothing trained."""
    return bool(metrics) and all(name.startswith(("val-core/", "val-aux/")) for name in metrics)


def evaluation_document(
    *, tasks: int, before: Mapping[str, float] | None, after: Mapping[str, float] | None
) -> dict[str, Any]:
    """What ``evaluation.json`` holds (``before`` is None without ``baseline_evaluation``)."""
    measured = [figures for figures in (before, after) if figures is not None]
    measure = EVALUATION if measured and all(EVALUATION in figures for figures in measured) else SUCCESS
    return {
        "tasks": tasks,
        "measure": measure,
        "before": dict(before) if before is not None else None,
        "after": dict(after) if after is not None else None,
    }


def pipeline_figures(document: Mapping[str, Any]) -> dict[str, float]:
    """The run's evaluation as the pipeline records it (the local backend's names): ``heldout_tasks``, then per
    measured phase ``heldout_evaluation_<when>`` (the measure's mean), ``heldout_success_<when>`` and
    ``heldout_reward_<when>``."""
    measure = document.get("measure") or SUCCESS
    figures = {"heldout_tasks": float(document["tasks"])}
    for when in ("before", "after"):
        phase = document.get(when)
        if not isinstance(phase, Mapping):
            continue
        figures[f"heldout_evaluation_{when}"] = float(phase[measure])
        figures[f"heldout_success_{when}"] = float(phase["success"])
        figures[f"heldout_reward_{when}"] = float(phase["reward"])
    return figures
