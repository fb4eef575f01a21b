"""A run's cost, priced by its own backend: the descriptor's ``cost`` hook on the usage its ``cost_usage`` hook reads.

``mtrl.cost`` only prices usage; which usage a run has, and which prices apply, is the backend's to say. A backend's
adapter prices its own runs directly (its ``cost`` module); the pipeline and the CLI, which serve every backend, come
through here.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from mtrl.contracts.backend import BackendAdapter, BackendError, Finding, RunContext
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


def budget_finding(run: RunContext, adapter: BackendAdapter) -> Finding | None:
    """Preflight's one budget check, the same for every backend: a run with ``max_budget_usd`` must be priceable
    before it starts (its backend's ``budget_usage`` priced by its ``cost`` hook), or the budget could never stop it.
    None when the run sets no budget."""
    budget = run.settings.get("max_budget_usd")
    if budget is None:
        return None
    backend = str(run.settings.get("backend"))
    region = run.settings.get("region")
    try:
        descriptor = descriptor_for(backend)
        if descriptor.budget_usage is None:
            raise CostError(f"backend '{backend}' declares no way to price a run before it starts (budget_usage)")
        usage = dict(resolve(descriptor.budget_usage)(run, adapter))
        estimate = cost_for_run({**usage, "backend": backend, "region": region})
    except (CostError, UnknownBackendError, BackendError, ValueError) as error:
        return Finding(
            "budget",
            False,
            f"run {run.run_id}: max_budget_usd {budget} cannot be enforced, because its cost cannot be computed "
            f"({backend} backend, region {region}): {error}. Add the price to mtrl/cost/prices.json, or drop "
            "max_budget_usd from the manifest (and run_max_budget_usd from the settings)",
        )
    assumed = f" (assumed prices: {'; '.join(estimate.assumptions)})" if estimate.assumptions else ""
    return Finding("budget", True, f"max_budget_usd {budget}: {backend} runs in {region} can be priced{assumed}")
