"""`mtrl cost RUN` prices a serverless run with the base model its training job recorded.

The base model is deploy-time (never in a manifest), so the run record's job resource is the only source;
the model used to be read from ``backend_options``, where it can no longer appear, so every run was priced as
the default model.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from mtrl.client.runs import run_cost
from mtrl.cost import CostError

USAGE = {"prefill": 491_616_806, "sample": 159_737_098, "train": 643_308_554}


def record(*resources: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": "wordle-v3-20261129T103000Z",
        "settings": {"backend": "serverless", "backend_options": {}},
        "resources": list(resources),
        "progress": {"billable_token_usage": USAGE},
    }


def job(model: str | None, category: str = "AgentRFT") -> dict[str, Any]:
    details: dict[str, Any] = {"category": category, "region": "us-east-1"}
    if model is not None:
        details["base_model"] = model
    return {"kind": "sagemaker-job", "identifier": "mtrl-job", "details": details}


def test_recorded_model_is_priced() -> None:
    estimate = run_cost(record(job("openai-reasoning-gpt-oss-20b")), region="us-east-1")
    assert estimate.total.quantize(Decimal("0.01")) == Decimal("338.50")


def test_a_model_without_a_price_is_an_error_not_the_default_models_price() -> None:
    # Before the fix this priced the default model (gpt-oss-20b) whatever the deployment trained.
    with pytest.raises(CostError, match="nova-textgeneration-lite-v2"):
        run_cost(record(job("nova-textgeneration-lite-v2")), region="us-east-1")


def test_the_evaluation_job_does_not_name_the_trained_model() -> None:
    with pytest.raises(CostError, match="names no base model"):
        run_cost(record(job("openai-reasoning-gpt-oss-20b", category="AgentRFTEvaluation")), region="us-east-1")


def test_no_job_recorded_is_a_clear_error() -> None:
    with pytest.raises(CostError, match="names no base model"):
        run_cost(record(), region="us-east-1")
