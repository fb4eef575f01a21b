"""Run cost from usage: serverless runs from ``BillableTokenUsage``, HyperPod runs from GPU instance-hours held.

Pure pricing: this package knows prices and usage, never backends. Each backend prices its own run with these
functions (its descriptor's ``cost`` hook); ``mtrl.backends.pricing`` picks the hook of a run's backend.

Prices come only from ``prices.json`` (docs/operations.md, "Costs"). A missing price is an error, never a silent zero,
and a price marked as an assumption is carried into the estimate so every report can say so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt, ValidationError

PRICES_FILE = Path(__file__).with_name("prices.json")
_MILLION = Decimal(1_000_000)
_CENT = Decimal("0.01")


class CostError(ValueError):
    """Bad usage input or no price for what was asked (the message says which and what is known)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TokenPrice(_Strict):
    prefill: NonNegativeFloat
    sample: NonNegativeFloat
    train: NonNegativeFloat
    assumption: bool
    source: str = Field(min_length=1)


class ModelPrices(_Strict):
    aliases: list[str] = []
    regions: dict[str, TokenPrice]
    note: str = ""


class InstancePrice(_Strict):
    hourly: NonNegativeFloat
    assumption: bool
    source: str = Field(min_length=1)


class InstancePrices(_Strict):
    regions: dict[str, InstancePrice]


class _ServerlessBook(_Strict):
    unit: str
    not_included: str = ""
    models: dict[str, ModelPrices]


class _HyperPodBook(_Strict):
    unit: str
    not_included: str = ""
    instances: dict[str, InstancePrices]


class AtRestPrice(_Strict):
    """One at-rest list price. ``confirmed`` is true only where the figure was read on the AWS pricing page itself
    (its source quotes that page and the date it was read); false where only third-party copies of the page agree,
    and then the source says "re-check it"."""

    price: NonNegativeFloat
    unit: str
    assumption: bool
    confirmed: bool
    source: str = Field(min_length=1)


class UsageFigure(_Strict):
    value: NonNegativeFloat
    unit: str
    assumption: bool
    source: str = Field(min_length=1)


class AtRestBook(_Strict):
    unit: str
    hours_per_month: int
    not_included: str = ""
    regions: dict[str, dict[str, AtRestPrice]]
    usage: dict[str, UsageFigure]
    unpriced_types: dict[str, str] = {}


class PriceBook(_Strict):
    about: list[str] = Field(default_factory=list, alias="_about")
    currency: str
    serverless: _ServerlessBook
    hyperpod: _HyperPodBook
    at_rest: AtRestBook | None = None

    def token_price(self, model: str, region: str) -> tuple[str, TokenPrice]:
        """The canonical model id and its prices in ``region`` (aliases accepted)."""
        canonical = self._canonical_model(model)
        regions = self.serverless.models[canonical].regions
        if region not in regions:
            known = ", ".join(sorted(regions)) or "none"
            raise CostError(f"no serverless token price for model '{canonical}' in region '{region}' (priced: {known})")
        return canonical, regions[region]

    def instance_price(self, instance_type: str, region: str) -> InstancePrice:
        if instance_type not in self.hyperpod.instances:
            known = ", ".join(sorted(self.hyperpod.instances))
            raise CostError(f"no hourly price for instance type '{instance_type}' (priced: {known})")
        regions = self.hyperpod.instances[instance_type].regions
        if region not in regions:
            raise CostError(
                f"no hourly price for '{instance_type}' in region '{region}' (priced: {', '.join(sorted(regions))})"
            )
        return regions[region]

    def _canonical_model(self, model: str) -> str:
        for name, prices in self.serverless.models.items():
            if model == name or model in prices.aliases:
                return name
        known = ", ".join(sorted(self.serverless.models))
        raise CostError(f"unknown serverless model '{model}' (known: {known})")


def load_price_book(path: Path | None = None) -> PriceBook:
    source = path or PRICES_FILE
    try:
        return PriceBook.model_validate(json.loads(source.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError, ValidationError) as error:
        raise CostError(f"price file {source} is unreadable or invalid: {error}") from error


class TokenUsage(_Strict):
    """Billable tokens of a serverless job (``BillableTokenUsage`` in DescribeJob's service output)."""

    prefill: NonNegativeInt = 0
    sample: NonNegativeInt = 0
    train: NonNegativeInt = 0

    @classmethod
    def from_billable(cls, usage: Mapping[str, Any]) -> TokenUsage:
        """Accept the service's field names or our own (``prefill``…). The botocore ``BillableTokenUsage`` shape says
        ``TrainingTokenCount``; the Wordle sample printed ``TrainTokenCount`` (both are read)."""
        names = {
            "prefill": ("PrefillTokenCount",),
            "sample": ("SampleTokenCount",),
            "train": ("TrainingTokenCount", "TrainTokenCount"),
        }
        values: dict[str, Any] = {}
        for ours, theirs in names.items():
            found = [name for name in theirs if name in usage]
            if found:
                values[ours] = usage[found[0]]
            elif ours in usage:
                values[ours] = usage[ours]
        unknown = set(usage) - set(names) - {name for spellings in names.values() for name in spellings}
        if unknown:
            raise CostError(f"unknown token-usage fields: {', '.join(sorted(unknown))}")
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            raise CostError(f"invalid token usage {dict(usage)}: token counts must be whole numbers ≥ 0") from error


@dataclass(frozen=True)
class GpuHold:
    """Instances of one type held by a run from ``start`` until ``end``."""

    instance_type: str
    count: int
    start: datetime
    end: datetime

    @property
    def hours(self) -> Decimal:
        seconds = (self.end - self.start).total_seconds()
        if seconds < 0:
            raise CostError(f"GPU hold of {self.instance_type} ends before it starts ({self.start} > {self.end})")
        return Decimal(str(seconds)) / Decimal(3600)


@dataclass(frozen=True)
class CostLine:
    item: str
    quantity: Decimal
    unit: str
    unit_price: Decimal
    amount: Decimal


@dataclass(frozen=True)
class CostEstimate:
    currency: str
    lines: tuple[CostLine, ...]
    assumptions: tuple[str, ...] = ()
    not_included: tuple[str, ...] = field(default_factory=tuple)

    @property
    def total(self) -> Decimal:
        return cents(sum((line.amount for line in self.lines), Decimal(0)))

    def __add__(self, other: CostEstimate) -> CostEstimate:
        if self.currency != other.currency:
            raise CostError(f"cannot add {self.currency} and {other.currency} estimates")
        return CostEstimate(
            currency=self.currency,
            lines=self.lines + other.lines,
            assumptions=unique(self.assumptions + other.assumptions),
            not_included=unique(self.not_included + other.not_included),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "currency": self.currency,
            "total": float(self.total),
            "lines": [
                {
                    "item": line.item,
                    "quantity": float(line.quantity),
                    "unit": line.unit,
                    "unit_price": float(line.unit_price),
                    "amount": float(line.amount),
                }
                for line in self.lines
            ],
            "assumptions": list(self.assumptions),
            "not_included": list(self.not_included),
        }


def serverless_cost(book: PriceBook, *, model: str, region: str, usage: TokenUsage) -> CostEstimate:
    canonical, price = book.token_price(model, region)
    lines = tuple(
        CostLine(
            item=f"{canonical} {kind} tokens ({region})",
            quantity=Decimal(count) / _MILLION,
            unit="M tokens",
            unit_price=Decimal(str(per_million)),
            amount=cents(Decimal(count) * Decimal(str(per_million)) / _MILLION),
        )
        for kind, count, per_million in (
            ("prefill", usage.prefill, price.prefill),
            ("sample", usage.sample, price.sample),
            ("train", usage.train, price.train),
        )
    )
    assumptions = (f"{canonical} in {region}: {price.source}",) if price.assumption else ()
    return CostEstimate(book.currency, lines, assumptions, _nonempty(book.serverless.not_included))


def hyperpod_cost(book: PriceBook, *, region: str, holds: Iterable[GpuHold]) -> CostEstimate:
    lines: list[CostLine] = []
    assumptions: list[str] = []
    for hold in holds:
        if hold.count < 0:
            raise CostError(f"instance count must be ≥ 0, got {hold.count}")
        price = book.instance_price(hold.instance_type, region)
        instance_hours = hold.hours * hold.count
        hourly = Decimal(str(price.hourly))
        lines.append(
            CostLine(
                item=f"{hold.instance_type} × {hold.count} ({region})",
                quantity=instance_hours,
                unit="instance-hour",
                unit_price=hourly,
                amount=cents(instance_hours * hourly),
            )
        )
        if price.assumption:
            assumptions.append(f"{hold.instance_type} in {region}: {price.source}")
    return CostEstimate(book.currency, tuple(lines), unique(tuple(assumptions)), _nonempty(book.hyperpod.not_included))


def hyperpod_cost_for_hours(
    book: PriceBook, *, region: str, instance_type: str, instances: int, hours: float
) -> CostEstimate:
    if hours < 0:
        raise CostError(f"hours must be ≥ 0, got {hours}")
    start = datetime(2000, 1, 1)  # only the duration matters
    return hyperpod_cost(
        book,
        region=region,
        holds=[GpuHold(instance_type, instances, start, start + timedelta(hours=hours))],
    )


def record_region(record: Mapping[str, Any]) -> str:
    """The region a run's usage is priced in (CostError when the record has none)."""
    region = record.get("region")
    if not isinstance(region, str) or not region:
        raise CostError("run record has no region")
    return region


def parse_hold(item: Any) -> GpuHold:
    try:
        return GpuHold(
            instance_type=str(item["instance_type"]),
            count=int(item["count"]),
            start=datetime.fromisoformat(str(item["start"])),
            end=datetime.fromisoformat(str(item["end"])),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise CostError(f"invalid GPU hold {item!r}: needs instance_type, count, start and end (ISO-8601)") from error


def cents(amount: Decimal) -> Decimal:
    return amount.quantize(_CENT, rounding=ROUND_HALF_UP)


def unique(items: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _nonempty(text: str) -> tuple[str, ...]:
    return (text,) if text else ()
