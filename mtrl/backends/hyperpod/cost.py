"""A hyperpod run's cost: the GPU instance-hours it held (``mtrl.cost.hyperpod_cost``)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from mtrl.backends.hyperpod.capacity import gpu_holds
from mtrl.backends.hyperpod.common import CAPACITY_KIND
from mtrl.cost.calculator import CostError, CostEstimate, PriceBook, hyperpod_cost, parse_hold, record_region


def estimate(usage: Mapping[str, Any], book: PriceBook) -> CostEstimate:
    """``usage``: ``region`` and ``gpu_holds``, a list of ``{"instance_type", "count", "start", "end"}`` with ISO-8601
    times (the adapter records these on the GPU scale-up resource)."""
    region = record_region(usage)
    raw_holds = usage.get("gpu_holds")
    if not isinstance(raw_holds, list):
        raise CostError("hyperpod run record needs 'gpu_holds' (a list)")
    return hyperpod_cost(book, region=region, holds=[parse_hold(item) for item in raw_holds])


def usage_from_record(record: Mapping[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """The GPU holds of a stored run record; capacity still held is priced up to now ("cost so far")."""
    stamp = (now or datetime.now(UTC)).isoformat()
    resources = [
        {**item, "removed_at": item.get("removed_at") or stamp} if item.get("kind") == CAPACITY_KIND else item
        for item in record.get("resources") or []
    ]
    return {"gpu_holds": gpu_holds(resources)}
