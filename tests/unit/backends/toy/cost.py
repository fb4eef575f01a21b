"""The toy backend's price: 0.25 USD per step its job ran."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from mtrl.cost.calculator import CostError, CostEstimate, CostLine, PriceBook, record_region

STEP_PRICE = Decimal("0.25")


def estimate(usage: Mapping[str, Any], book: PriceBook) -> CostEstimate:
    region = record_region(usage)
    steps = usage.get("toy_steps")
    if not isinstance(steps, int) or steps < 0:
        raise CostError("toy run record needs 'toy_steps' (a count)")
    amount = STEP_PRICE * steps
    line = CostLine(
        item=f"toy steps ({region})", quantity=Decimal(steps), unit="step", unit_price=STEP_PRICE, amount=amount
    )
    return CostEstimate(book.currency, (line,))


def usage_from_record(record: Mapping[str, Any], now: datetime | None = None) -> dict[str, Any]:
    return {"toy_steps": (record.get("progress") or {}).get("step", 0)}


def budget_usage(run: Any, adapter: Any) -> dict[str, Any]:
    """Before the job: no steps run yet (a toy run can always be priced, so its budget is enforced)."""
    return {"toy_steps": 0}
