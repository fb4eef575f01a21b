"""Break-even of a per-token training service (the ``sessions`` backend) against GPU hours on the deployment's own
GPU group (the ``verl`` backend), for one run size.

For a run of ``T`` billed tokens: the service costs ``T × p`` (``p`` per million tokens); verl costs ``H × R``, where
``R`` is the GPU group's hourly rate (instances × the instance type's price) and ``H`` the hours verl takes for the
same run. They break even at ``H* = T × p / R`` hours, or, for a given ``H``, at ``p* = H × R / T`` per million
tokens. Where ``p`` has no source, only the second form is computed: the price the service would have to beat.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from mtrl.cost.calculator import CostError, PriceBook, TokenUsage, cents

_MILLION = Decimal(1_000_000)
# Verl run lengths the break-even price is shown for when the operator gives none (hours).
DEFAULT_HOURS: tuple[Decimal, ...] = (Decimal(1), Decimal(4), Decimal(12), Decimal(24))


@dataclass(frozen=True)
class BreakEvenRow:
    verl_hours: Decimal
    verl_cost: Decimal
    break_even_per_million: Decimal  # the per-token price at which the service costs what verl does


@dataclass(frozen=True)
class BreakEven:
    region: str
    tokens: TokenUsage
    instance_type: str
    instances: int
    hourly_rate: Decimal  # the GPU group's, all instances
    rate_assumed: str | None  # the price book's note when the instance price is an assumption
    service_cost: Decimal | None  # None: the per-token price has no source
    service_unpriced: str | None  # why, when service_cost is None
    rows: tuple[BreakEvenRow, ...]

    @property
    def total_tokens(self) -> int:
        return self.tokens.prefill + self.tokens.sample + self.tokens.train

    @property
    def break_even_hours(self) -> Decimal | None:
        """Hours of the GPU group that cost what the service charges for this run (None: the service is unpriced)."""
        if self.service_cost is None:
            return None
        return (self.service_cost / self.hourly_rate).quantize(Decimal("0.01"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "region": self.region,
            "tokens": {**self.tokens.model_dump(), "total": self.total_tokens},
            "sessions_cost_usd": None if self.service_cost is None else float(self.service_cost),
            "sessions_unpriced": self.service_unpriced,
            "verl_group": {
                "instance_type": self.instance_type,
                "instances": self.instances,
                "usd_per_hour": float(self.hourly_rate),
                "assumed_price": self.rate_assumed,
            },
            "break_even_verl_hours": None if self.break_even_hours is None else float(self.break_even_hours),
            "break_even_by_verl_hours": [
                {
                    "verl_hours": float(row.verl_hours),
                    "verl_cost_usd": float(row.verl_cost),
                    "sessions_usd_per_million_tokens": float(row.break_even_per_million),
                }
                for row in self.rows
            ],
        }


def break_even(
    book: PriceBook,
    *,
    region: str,
    tokens: TokenUsage,
    service_cost: Decimal | None,
    service_unpriced: str | None,
    instance_type: str,
    instances: int,
    verl_hours: tuple[Decimal, ...] = DEFAULT_HOURS,
) -> BreakEven:
    """``service_cost``: what the service charges for ``tokens`` (None with ``service_unpriced`` saying why)."""
    total = tokens.prefill + tokens.sample + tokens.train
    if total == 0:
        raise CostError("a break-even needs the run's size: give its token counts")
    if instances < 1:
        raise CostError(f"the GPU group needs at least 1 instance, got {instances}")
    price = book.instance_price(instance_type, region)
    rate = Decimal(str(price.hourly)) * instances
    rows = tuple(
        BreakEvenRow(hours, cents(hours * rate), (hours * rate * _MILLION / Decimal(total)).quantize(Decimal("0.0001")))
        for hours in verl_hours
    )
    return BreakEven(
        region=region,
        tokens=tokens,
        instance_type=instance_type,
        instances=instances,
        hourly_rate=rate,
        rate_assumed=price.source if price.assumption else None,
        service_cost=service_cost,
        service_unpriced=service_unpriced,
        rows=rows,
    )
