"""Cost calculator and `mtrl cost`: the published Wordle run must price to the published total."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mtrl.cli import app
from mtrl.cost import (
    CostError,
    TokenUsage,
    hyperpod_cost_for_hours,
    load_price_book,
    serverless_cost,
)
from mtrl.cost.calculator import PRICES_FILE

# The 100-step Wordle run (AWS's hands-on MTRL guide): these token counts at $0.12/$0.30/$0.36 per million were $338.50.
WORDLE_USAGE = {"PrefillTokenCount": 491_616_806, "SampleTokenCount": 159_737_098, "TrainTokenCount": 643_308_554}


def test_published_wordle_run_prices_to_published_total() -> None:
    book = load_price_book()
    estimate = serverless_cost(
        book, model="openai-reasoning-gpt-oss-20b", region="us-east-1", usage=TokenUsage.from_billable(WORDLE_USAGE)
    )
    assert [line.amount for line in estimate.lines] == [Decimal("58.99"), Decimal("47.92"), Decimal("231.59")]
    assert estimate.total == Decimal("338.50")
    assert estimate.assumptions == ()  # us-east-1 gpt-oss-20b is a sourced figure
    assert any("AgentCore" in note for note in estimate.not_included)


def test_alias_and_assumed_region_are_flagged() -> None:
    estimate = serverless_cost(
        load_price_book(), model="gpt-oss-20b", region="us-west-2", usage=TokenUsage(prefill=1_000_000)
    )
    assert estimate.total == Decimal("0.12")
    assert len(estimate.assumptions) == 1
    assert "ASSUMPTION" in estimate.assumptions[0]


@pytest.mark.parametrize(
    ("model", "region", "fragment"),
    [
        ("no-such-model", "us-east-1", "unknown serverless model"),
        ("gpt-oss-20b", "eu-west-1", "priced: us-east-1, us-west-2"),
        ("nova-2-lite", "us-east-1", "priced: none"),  # listed model without a price is an error, not $0
    ],
)
def test_missing_price_is_an_error(model: str, region: str, fragment: str) -> None:
    with pytest.raises(CostError, match=fragment):
        serverless_cost(load_price_book(), model=model, region=region, usage=TokenUsage())


def test_token_usage_rejects_bad_input() -> None:
    with pytest.raises(CostError, match="unknown token-usage fields: Bogus"):
        TokenUsage.from_billable({"Bogus": 1})
    with pytest.raises(CostError, match="whole numbers"):
        TokenUsage.from_billable({"TrainTokenCount": -5})
    assert TokenUsage.from_billable({"train": 7}).train == 7


def test_hyperpod_instance_hours() -> None:
    estimate = hyperpod_cost_for_hours(
        load_price_book(), region="us-east-1", instance_type="ml.p5.48xlarge", instances=2, hours=1.5
    )
    hourly = Decimal(str(load_price_book().instance_price("ml.p5.48xlarge", "us-east-1").hourly))
    assert estimate.lines[0].quantity == Decimal(3)
    assert estimate.total == (hourly * 3).quantize(Decimal("0.01"))
    assert estimate.assumptions  # the instance prices are marked as assumptions in the file
    with pytest.raises(CostError, match=r"no hourly price for instance type 'ml\.x\.large'"):
        hyperpod_cost_for_hours(load_price_book(), region="us-east-1", instance_type="ml.x.large", instances=1, hours=1)


def test_price_file_marks_every_figure_with_a_source() -> None:
    document = json.loads(PRICES_FILE.read_text())
    for model in document["serverless"]["models"].values():
        for price in model["regions"].values():
            assert isinstance(price["assumption"], bool)
            assert price["source"]
    for instance in document["hyperpod"]["instances"].values():
        for price in instance["regions"].values():
            assert isinstance(price["assumption"], bool)
            assert price["source"]


def test_invalid_price_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "prices.json"
    bad.write_text('{"currency": "USD"}')
    with pytest.raises(CostError, match="invalid"):
        load_price_book(bad)


runner = CliRunner()


def test_cli_json_output() -> None:
    result = runner.invoke(
        app,
        [
            "cost",
            "--model",
            "gpt-oss-20b",
            "--region",
            "us-east-1",
            "--prefill-tokens",
            "491616806",
            "--sample-tokens",
            "159737098",
            "--train-tokens",
            "643308554",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["total"] == 338.5


def test_cli_combined_and_table() -> None:
    result = runner.invoke(
        app,
        [
            "cost",
            "--region",
            "us-east-1",
            "--model",
            "gpt-oss-20b",
            "--train-tokens",
            "1000000",
            "--instance-type",
            "ml.p5.48xlarge",
            "--instances",
            "1",
            "--hours",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "total" in result.stdout
    assert "ml.p5.48xlarge" in result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["cost", "--region", "us-east-1"],
        ["cost", "--region", "us-east-1", "--train-tokens", "5", "--instance-type", "ml.p5.48xlarge"],
        ["cost", "--region", "us-east-1", "--model", "gpt-oss-20b", "--hours", "2"],
        ["cost", "--region", "mars-1", "--model", "gpt-oss-20b", "--json"],
    ],
)
def test_cli_usage_errors_exit_2(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output


def test_cli_negative_tokens_rejected() -> None:
    assert runner.invoke(app, ["cost", "--region", "us-east-1", "--model", "x", "--train-tokens", "-1"]).exit_code == 2


def test_qwen_3_6_27b_is_known_but_unpriced_and_mtrl_cost_says_so() -> None:
    # Issue 20 item 9: serverless MTRL offers Qwen3.6 27B (huggingface-vlm-qwen3-6-27b) in us-west-2, and no source we
    # have publishes its token prices: `mtrl cost` names the missing price instead of inventing one (or calling the
    # model unknown).
    result = runner.invoke(
        app, ["cost", "--region", "us-west-2", "--model", "huggingface-vlm-qwen3-6-27b", "--train-tokens", "1000"]
    )
    assert result.exit_code != 0
    assert "no serverless token price for model 'huggingface-vlm-qwen3-6-27b' in region 'us-west-2'" in result.output
    assert "unknown serverless model" not in result.output
