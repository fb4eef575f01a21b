"""The ``local`` backend's descriptor (the adapter is ``mtrl.backends.local``): read without importing the adapter.

A local run trains on the CPU inside the pipeline's own functions: it takes no per-run options (its knobs are
hyperparameters, ``mtrl.local.config.TrainConfig``), scores rollouts itself, and costs nothing beyond the functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mtrl.contracts.descriptor import BackendDescriptor, BaselineSupport

if TYPE_CHECKING:
    from mtrl.cost.calculator import CostEstimate, PriceBook


def free_run(usage: Mapping[str, Any], book: PriceBook) -> CostEstimate:
    """A local run costs nothing to price (no region needed)."""
    from mtrl.cost.calculator import CostEstimate  # noqa: PLC0415  (pydantic only when pricing)

    return CostEstimate(book.currency, ())


def nothing_used(run: Any, adapter: Any) -> dict[str, Any]:
    """A local run's usage before it starts: nothing (``free_run`` prices it at zero)."""
    return {}


DESCRIPTOR = BackendDescriptor(
    name="local",
    adapter="mtrl.backends.local:LocalAdapter",
    baseline=BaselineSupport(
        phase=False,
        how="the untrained policy's held-out evaluation at step 0 (same tasks and seed as the after-training one)",
    ),
    cost=free_run,
    budget_usage=nothing_used,
)
