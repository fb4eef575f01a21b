"""Break-even of a per-token service against GPU-group hours (issue 37 item 5), checked by hand arithmetic."""

from __future__ import annotations

from decimal import Decimal

import pytest

from mtrl.cost import CostError, TokenUsage, load_price_book
from mtrl.cost.break_even import DEFAULT_HOURS, break_even

BOOK = load_price_book()
TOKENS = TokenUsage(prefill=600_000_000, sample=150_000_000, train=250_000_000)  # one billion in all


def test_a_priced_service_breaks_even_at_the_hours_its_cost_buys_on_the_group() -> None:
    # 2 × ml.g5.8xlarge at USD 3.06 (prices.json, us-east-1) = USD 6.12 an hour; USD 61.20 buys 10 hours.
    result = break_even(
        BOOK,
        region="us-east-1",
        tokens=TOKENS,
        service_cost=Decimal("61.20"),
        service_unpriced=None,
        instance_type="ml.g5.8xlarge",
        instances=2,
        verl_hours=(Decimal(10),),
    )
    assert result.hourly_rate == Decimal("6.12")
    assert result.break_even_hours == Decimal("10.00")
    (row,) = result.rows
    # 10 h × USD 6.12 = USD 61.20 for 1,000 M tokens: USD 0.0612 per million.
    assert (row.verl_cost, row.break_even_per_million) == (Decimal("61.20"), Decimal("0.0612"))
    assert result.rate_assumed is not None  # the g5 price is marked an assumption in the book


def test_an_unpriced_service_gets_no_invented_cost_only_the_price_it_must_beat() -> None:
    result = break_even(
        BOOK,
        region="us-east-1",
        tokens=TOKENS,
        service_cost=None,
        service_unpriced="unsourced",
        instance_type="ml.g5.8xlarge",
        instances=1,
    )
    assert result.break_even_hours is None
    document = result.to_dict()
    assert document["sessions_cost_usd"] is None
    assert document["sessions_unpriced"] == "unsourced"
    assert [row.verl_hours for row in result.rows] == list(DEFAULT_HOURS)
    assert result.rows[0].break_even_per_million == Decimal("0.0031")  # 3.06 / 1,000 M tokens, rounded


def test_a_break_even_needs_a_run_size_and_a_priced_group() -> None:
    with pytest.raises(CostError, match="give its token counts"):
        break_even(
            BOOK, region="us-east-1", tokens=TokenUsage(), service_cost=None, service_unpriced="x",
            instance_type="ml.g5.8xlarge", instances=1,
        )  # fmt: skip
    with pytest.raises(CostError, match=r"no hourly price for 'ml\.g5\.8xlarge' in region 'eu-west-1'"):
        break_even(
            BOOK, region="eu-west-1", tokens=TOKENS, service_cost=None, service_unpriced="x",
            instance_type="ml.g5.8xlarge", instances=1,
        )  # fmt: skip
