"""A verl run's price before it starts: the deployment's training group's instance type, no hours held yet.

While it runs and after, a verl run is priced like a hyperpod run (``mtrl.backends.hyperpod.cost``): the GPU
instance-hours its capacity resources record.
"""

from __future__ import annotations

from typing import Any

from mtrl.backends.hyperpod.cost import zero_hold
from mtrl.cost.calculator import CostError


def budget_usage(run: Any, adapter: Any) -> dict[str, Any]:
    instance_type = run.settings.get("verl_instance_type")
    if not isinstance(instance_type, str) or not instance_type:
        raise CostError("the deployment ships no verl_instance_type (the training group's instance type)")
    return zero_hold(instance_type)
