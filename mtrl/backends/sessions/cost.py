"""A sessions run's cost, from the tokens its training service billed (``TokenUsage``; SageMaker:
``BillableTokenUsage``).

A local-service run costs nothing beyond the compute it ran on. SageMaker training-session per-token prices are not
in mtrl's price book: no AWS price list or document we could find publishes them (the service's source note,
``sagemaker_service``), and the book takes no invented figure, so pricing such a run raises ``CostError`` naming its
token counts. Add a sourced price to ``mtrl/cost/prices.json`` and a reader here to price them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from mtrl.cost.calculator import CostError, CostEstimate, PriceBook, TokenUsage

UNSOURCED = (
    "SageMaker training-session per-token prices are unsourced (no published price list found; mtrl's price book "
    "holds none), so a sagemaker sessions run cannot be priced"
)


def estimate(usage: Mapping[str, Any], book: PriceBook) -> CostEstimate:
    """``usage``: ``service`` (``local`` or ``sagemaker``) and ``token_usage`` (prefill, sample, train)."""
    service = usage.get("service")
    tokens = TokenUsage.from_billable(usage.get("token_usage") or {})
    if service == "local":
        return CostEstimate(book.currency, ())
    if service == "sagemaker":
        raise CostError(f"{UNSOURCED}: {tokens.prefill} prefill, {tokens.sample} sample, {tokens.train} train tokens")
    raise CostError(f"sessions run record needs 'service' (local or sagemaker), not {service!r}")


def budget_usage(run: Any, adapter: Any) -> dict[str, Any]:
    """Before the loop starts: the service the run's options choose, with no tokens billed yet."""
    from mtrl.backends.sessions.options import run_options  # noqa: PLC0415  (pydantic models of the options)

    return {"service": run_options(run.settings).service, "token_usage": {}}


def usage_from_record(record: Mapping[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """What ``estimate`` reads, from a stored run record: the service (as the run reported it, else as its options
    chose it) and the tokens billed so far."""
    progress = record.get("progress") or {}
    options = (record.get("settings") or {}).get("backend_options") or {}
    service = progress.get("service") or options.get("service") or "sagemaker"
    return {"service": service, "token_usage": progress.get("token_usage") or {}}
