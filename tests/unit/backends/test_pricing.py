"""A run priced by its own backend: ``mtrl.backends.pricing`` picks the run's backend's cost hook."""

from __future__ import annotations

from decimal import Decimal

import pytest

from mtrl.backends.pricing import cost_for_run
from mtrl.cost import CostError

# The published Wordle run's BillableTokenUsage (tests/unit/cost/test_cost_calculator.py prices it directly).
WORDLE_USAGE = {"PrefillTokenCount": 491_616_806, "SampleTokenCount": 159_737_098, "TrainTokenCount": 643_308_554}


def test_cost_for_run_records() -> None:
    serverless = cost_for_run(
        {"backend": "serverless", "region": "us-east-1", "model": "gpt-oss-20b", "billable_token_usage": WORDLE_USAGE}
    )
    assert serverless.total == Decimal("338.50")
    hyperpod = cost_for_run(
        {
            "backend": "hyperpod",
            "region": "us-east-1",
            "gpu_holds": [
                {
                    "instance_type": "ml.g5.12xlarge",
                    "count": 2,
                    "start": "2026-11-29T10:00:00+00:00",
                    "end": "2026-11-29T10:30:00+00:00",
                },
            ],
        }
    )
    assert hyperpod.lines[0].quantity == Decimal(1)
    assert cost_for_run({"backend": "local"}).total == Decimal(0)
    with pytest.raises(CostError, match="ends before it starts"):
        cost_for_run(
            {
                "backend": "hyperpod",
                "region": "us-east-1",
                "gpu_holds": [
                    {
                        "instance_type": "ml.g5.12xlarge",
                        "count": 1,
                        "start": "2026-11-29T11:00:00",
                        "end": "2026-11-29T10:00:00",
                    }
                ],
            }
        )
    with pytest.raises(CostError, match="unknown backend"):
        cost_for_run({"backend": "ec2", "region": "us-east-1"})
