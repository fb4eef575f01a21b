"""A run's cost, priced by its own backend: the descriptor's ``cost`` hook on the usage its ``cost_usage`` hook reads.

``mtrl.cost`` only prices usage; which usage a run has, and which prices apply, is the backend's to say. A backend's
adapter prices its own runs directly (its ``cost`` module); the pipeline and the CLI, which serve every backend, come
through here.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from mtrl.contracts.descriptor import resolve
from mtrl.contracts.registry import UnknownBackendError, descriptor_for
from mtrl.cost.calculator import CostError, CostEstimate, PriceBook, load_price_book


def cost_for_run(usage: Mapping[str, Any], book: PriceBook | None = None) -> CostEstimate:
    """Price a run's usage with its backend's cost hook (``BackendDescriptor.cost``).

    Expected keys: ``backend`` (a registered backend) and what that backend prices, for example ``region`` with, for
    serverless, ``model`` and ``billable_token_usage`` (DescribeJob's ``BillableTokenUsage``) or, for hyperpod,
    ``gpu_holds``. A local run costs nothing; a backend without a cost hook cannot be priced (CostError).
    """
    backend = usage.get("backend")
    try:
        descriptor = descriptor_for(str(backend))
    except UnknownBackendError as error:
        raise CostError(f"{error} in run record") from None
    if descriptor.cost is None:
        raise CostError(f"backend '{backend}' declares no cost estimate, so its runs cannot be priced")
    estimate: CostEstimate = resolve(descriptor.cost)(usage, book or load_price_book())
    return estimate


def cost_of_record(record: Mapping[str, Any], *, region: str, now: datetime | None = None) -> CostEstimate:
    """The cost of a stored run record (``mtrl cost RUN``, ``mtrl status``): the usage its backend's
    ``cost_usage`` hook reads from the record (capacity still held is priced up to ``now``), priced as above."""
    settings = record.get("settings") or {}
    backend = settings.get("backend")
    usage: dict[str, Any] = {"backend": backend, "region": region}
    try:
        descriptor = descriptor_for(str(backend))
    except UnknownBackendError:
        descriptor = None  # cost_for_run says so
    if descriptor is not None and descriptor.cost_usage is not None:
        usage.update(resolve(descriptor.cost_usage)(record, now))
    return cost_for_run(usage)
