"""Run cost: token prices (serverless) and instance-hour prices (HyperPod), kept in ``prices.json``."""

from mtrl.cost.calculator import (
    CostError,
    CostEstimate,
    CostLine,
    GpuHold,
    PriceBook,
    TokenUsage,
    hyperpod_cost,
    hyperpod_cost_for_hours,
    load_price_book,
    serverless_cost,
)

__all__ = [
    "CostError",
    "CostEstimate",
    "CostLine",
    "GpuHold",
    "PriceBook",
    "TokenUsage",
    "hyperpod_cost",
    "hyperpod_cost_for_hours",
    "load_price_book",
    "serverless_cost",
]
