"""A serverless run's cost: its billable tokens at the base model's prices (``mtrl.cost.serverless_cost``)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from mtrl.cost.calculator import CostError, CostEstimate, PriceBook, TokenUsage, record_region, serverless_cost


def estimate(usage: Mapping[str, Any], book: PriceBook) -> CostEstimate:
    """``usage``: ``region``, ``model`` and ``billable_token_usage`` (DescribeJob's ``BillableTokenUsage``)."""
    region = record_region(usage)
    tokens = usage.get("billable_token_usage")
    model = usage.get("model")
    if not isinstance(model, str) or not isinstance(tokens, Mapping):
        raise CostError("serverless run record needs 'model' and 'billable_token_usage'")
    return serverless_cost(book, model=model, region=region, usage=TokenUsage.from_billable(tokens))


def budget_usage(run: Any, adapter: Any) -> dict[str, Any]:
    """Before the job: the base model the job will train (the deployment's), with no tokens billed yet."""
    from mtrl.backends.serverless.settings import DEFAULT_BASE_MODEL  # noqa: PLC0415

    return {"model": run.settings.get("serverless_base_model") or DEFAULT_BASE_MODEL, "billable_token_usage": {}}


def usage_from_record(record: Mapping[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """What ``estimate`` reads, from a stored run record: the training job's base model and its billable tokens."""
    return {
        "model": base_model(record),
        "billable_token_usage": (record.get("progress") or {}).get("billable_token_usage") or {},
    }


def base_model(record: Mapping[str, Any]) -> str:
    """The base model the run's training job was created with, as the serverless backend recorded it.

    The model is a deploy-time setting (never in the manifest), so the run record's job resource is the only
    place that says which one this run used; guessing the default would misprice a deployment that changed it.
    """
    from mtrl.backends.serverless.settings import JOB_KIND, TRAINING_CATEGORY  # noqa: PLC0415

    for resource in record.get("resources") or []:
        details = resource.get("details") or {}
        if resource.get("kind") == JOB_KIND and details.get("category", TRAINING_CATEGORY) == TRAINING_CATEGORY:
            model = details.get("base_model")
            if isinstance(model, str) and model:
                return model
    raise CostError("the run record names no base model for its training job (no training job recorded yet)")
