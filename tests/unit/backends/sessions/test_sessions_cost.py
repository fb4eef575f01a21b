"""A sessions run's cost: a local-service run costs 0; a SageMaker one cannot be priced, because training-session
per-token prices are unsourced (the price book holds no invented figure), and the error says so with the tokens."""

from __future__ import annotations

from decimal import Decimal

import pytest

from mtrl.backends.pricing import cost_for_run, cost_of_record
from mtrl.backends.sessions.cost import estimate, usage_from_record
from mtrl.cost.calculator import CostError, load_price_book

TOKENS = {"prefill": 1200, "sample": 300, "train": 1500}


def test_a_local_service_run_costs_nothing() -> None:
    priced = cost_for_run({"backend": "sessions", "service": "local", "token_usage": TOKENS})
    assert priced.total == Decimal(0)
    assert priced.lines == ()


def test_a_sagemaker_run_is_not_priced_with_unsourced_prices() -> None:
    with pytest.raises(CostError, match="unsourced") as refused:
        estimate({"service": "sagemaker", "token_usage": TOKENS}, load_price_book())
    assert "1200 prefill, 300 sample, 1500 train tokens" in str(refused.value)


def test_a_run_without_a_service_is_an_error() -> None:
    with pytest.raises(CostError, match="needs 'service'"):
        estimate({"token_usage": TOKENS}, load_price_book())


def test_the_usage_of_a_stored_record() -> None:
    record = {
        "settings": {"backend": "sessions", "backend_options": {"service": "local"}},
        "progress": {"step": 2, "token_usage": TOKENS},
    }
    assert usage_from_record(record) == {"service": "local", "token_usage": TOKENS}
    assert usage_from_record({"settings": {"backend": "sessions"}}) == {"service": "sagemaker", "token_usage": {}}
    assert cost_of_record(record, region="us-east-1").total == Decimal(0)
    sagemaker = {**record, "progress": {"service": "sagemaker", "token_usage": TOKENS}}
    with pytest.raises(CostError, match="unsourced"):
        cost_of_record(sagemaker, region="us-west-2")
