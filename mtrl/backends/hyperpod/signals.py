"""The hyperpod backend's signal rows: the reward workers' episode lines (``mtrl.backends.episode_rows``), per step.

The reward workers already publish their episode figures with the run's id (``mtrl.health.emf``, dimension
``RunId``), so they need no new permission and write nothing to the run's prefix (they run the environment's code
under the weakest role). What they cannot know is the trainer's step: a rollout request carries none, and the Nova
Forge runner's status report (``SMHPStatusManager.get_job_status``) has no step either — Nova Forge reports its
curves to MLflow. So when the status report has no ``step``, the step is estimated from the work done: episodes
scored since the job was submitted ÷ the rollouts of one step, the recipe override ``global_batch_size`` (an
assumption about the recipe, not checked against a running job: see docs/operations.md "Training health"), capped
at ``max_steps``, the planned steps. Without both overrides there is no estimate, and no rows. The rows of an
estimate say their planned steps are unknown (header ``planned_steps`` 0), so a wrong estimate can never fail a run
as ``incomplete``; the status still shows ``max_steps`` as the total.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from mtrl.backends.episode_rows import episode_count

ROLLOUTS_PER_STEP = "global_batch_size"
PLANNED_STEPS = "max_steps"
ESTIMATE_NOTE = f"estimated: episodes scored / {ROLLOUTS_PER_STEP}"


def _positive_int(value: Any) -> int | None:
    """A recipe override as a positive integer (overrides may be numbers or numeric strings), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    return value if isinstance(value, int) and value > 0 else None


def estimated_progress(
    cloudwatch: Any,
    *,
    hyperparameters: Mapping[str, Any],
    dimensions: Mapping[str, str],
    since: datetime,
    until: datetime,
) -> dict[str, Any] | None:
    """``{"step", "total_steps", "step_source"}`` from the episodes scored; None without the two overrides."""
    per_step, planned = (
        _positive_int(hyperparameters.get(ROLLOUTS_PER_STEP)),
        _positive_int(hyperparameters.get(PLANNED_STEPS)),
    )
    if per_step is None or planned is None:
        return None
    episodes = episode_count(cloudwatch, dimensions=dimensions, since=since, until=until)
    return {"step": min(planned, episodes // per_step), "total_steps": planned, "step_source": ESTIMATE_NOTE}
