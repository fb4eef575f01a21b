"""A hyperpod run's cost: the GPU instance-hours it held (``mtrl.cost.hyperpod_cost``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from mtrl.backends.hyperpod.capacity import gpu_holds
from mtrl.backends.hyperpod.common import CAPACITY_KIND
from mtrl.contracts.backend import CreatedResource
from mtrl.cost.calculator import (
    CostError,
    CostEstimate,
    PriceBook,
    hyperpod_cost,
    load_price_book,
    parse_hold,
    record_region,
)


def estimate(usage: Mapping[str, Any], book: PriceBook) -> CostEstimate:
    """``usage``: ``region`` and ``gpu_holds``, a list of ``{"instance_type", "count", "start", "end"}`` with ISO-8601
    times (the adapter records these on the GPU scale-up resource)."""
    region = record_region(usage)
    raw_holds = usage.get("gpu_holds")
    if not isinstance(raw_holds, list):
        raise CostError("hyperpod run record needs 'gpu_holds' (a list)")
    return hyperpod_cost(book, region=region, holds=[parse_hold(item) for item in raw_holds])


def budget_usage(run: Any, adapter: Any) -> dict[str, Any]:
    """Before the scale-up: the run's GPU group's instance type (read from the cluster), no hours held yet."""
    return zero_hold(adapter.gpu_instance_type(run))


def zero_hold(instance_type: str) -> dict[str, Any]:
    """``gpu_holds`` of a run that holds nothing yet: enough to ask the book for the instance type's price."""
    now = datetime.now(UTC).isoformat()
    return {"gpu_holds": [{"instance_type": instance_type, "count": 0, "start": now, "end": now}]}


def cost_so_far(resources: Iterable[CreatedResource], *, region: str, now: datetime) -> float | None:
    """What the GPU capacity ``resources`` record has cost up to ``now`` (the pipeline's budget guard reads it); None
    when nothing was scaled up yet or the instance type has no price."""
    stamp = now.isoformat()
    held = [
        replace(r, details={**r.details, "released_at": r.details.get("released_at") or stamp})
        for r in resources
        if r.kind == CAPACITY_KIND
    ]
    holds = gpu_holds(held)
    if not holds:
        return None
    try:
        return float(estimate({"region": region, "gpu_holds": holds}, load_price_book()).total)
    except CostError:
        return None


def usage_from_record(record: Mapping[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """The GPU holds of a stored run record; capacity still held is priced up to now ("cost so far")."""
    stamp = (now or datetime.now(UTC)).isoformat()
    resources = [
        {**item, "removed_at": item.get("removed_at") or stamp} if item.get("kind") == CAPACITY_KIND else item
        for item in record.get("resources") or []
    ]
    return {"gpu_holds": gpu_holds(resources)}
