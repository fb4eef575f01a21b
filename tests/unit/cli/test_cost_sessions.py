"""`mtrl cost --sessions`: a sessions run's cost from its token counts and its break-even against verl on the
deployment's GPU group (issue 37 item 5); an unsourced per-token price is said to be missing, never invented."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from mtrl.cli import app

TOKENS = ["--prefill-tokens", "600000000", "--sample-tokens", "150000000", "--train-tokens", "250000000"]


def test_sessions_cost_says_the_price_is_unsourced_and_gives_the_price_to_beat() -> None:
    result = CliRunner().invoke(
        app, ["cost", "--sessions", "--region", "us-east-1", *TOKENS, "--hours", "10", "--json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["sessions_cost_usd"] is None
    assert "unsourced" in document["sessions_unpriced"]
    assert "600000000 prefill, 150000000 sample, 250000000 train tokens" in document["sessions_unpriced"]
    # The deployment's GPU group from cdk.json: the default training group, 1 × ml.g5.8xlarge at USD 3.06.
    assert document["verl_group"]["instance_type"] == "ml.g5.8xlarge"
    assert document["verl_group"]["instances"] == 1
    assert document["break_even_by_verl_hours"] == [
        {"verl_hours": 10.0, "verl_cost_usd": 30.6, "sessions_usd_per_million_tokens": 0.0306}
    ]
    table = CliRunner().invoke(app, ["cost", "--sessions", "--region", "us-east-1", *TOKENS, "--instances", "2"])
    assert table.exit_code == 0
    assert "sessions cost: unpriced" in table.stdout
    assert "2 × ml.g5.8xlarge = $6.12 per hour" in table.stdout


def test_sessions_cost_refuses_what_it_cannot_compute() -> None:
    no_size = CliRunner().invoke(app, ["cost", "--sessions", "--region", "us-east-1"])
    assert no_size.exit_code != 0
    assert "give its token counts" in no_size.output
    elsewhere = CliRunner().invoke(app, ["cost", "--sessions", "--region", "eu-west-1", *TOKENS])
    assert elsewhere.exit_code != 0
    assert "no hourly price for 'ml.g5.8xlarge' in region 'eu-west-1'" in elsewhere.output
