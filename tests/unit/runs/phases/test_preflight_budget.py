"""Issue 36 item 4: a run with a budget whose cost cannot be computed is refused at Preflight, for every backend, by
one check (``mtrl.backends.pricing.budget_finding``); it is never run unchecked. The real phases on moto DynamoDB and
S3, each backend's real descriptor (its ``cost`` and ``budget_usage`` hooks) and a recording adapter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest

from mtrl.contracts.backend import Finding, JobState, JobStatus, RunContext
from mtrl.contracts.errors import PreflightFailed
from mtrl.runs import adapters
from mtrl.runs.phases.provision import preflight
from mtrl.runs.runtime import Runtime
from mtrl.settings.pipeline import PipelineSettings
from tests.aws_fixtures import create_versioned_bucket
from tests.run_table import create_run_table
from tests.unit.runs.phases.test_resolved_inputs import BUCKET, start

HUB_MODEL = "arn:aws:sagemaker:us-east-1:aws:hub-content/SageMakerPublicHub/Model/qwen3-4b/1.0.0"


@dataclass
class Recorder:
    """A backend adapter whose own checks pass; the hyperpod budget reads its GPU group's instance type from it."""

    name: str
    instance_type: str = "ml.p5.48xlarge"
    seen: list[str] = field(default_factory=list)

    def preflight(self, run: RunContext) -> list[Finding]:
        self.seen.append("preflight")
        return [Finding("ok", True, "fine")]

    def gpu_instance_type(self, run: RunContext) -> str:
        return self.instance_type

    def provision(self, run: RunContext) -> list[Any]:
        self.seen.append("provision")
        return []

    def submit(self, run: RunContext) -> str:
        return "job-1"

    def status(self, run: RunContext, job_id: str) -> JobStatus:
        return JobStatus(state=JobState.RUNNING)

    def cancel(self, run: RunContext, job_id: str) -> None: ...

    def cleanup(self, run: RunContext) -> list[Any]:
        return []


# backend → (deploy-time settings, manifest additions, a region it is priced in, what the refusal names)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any], str, str]] = {
    "verl": ({"verl_instance_type": "ml.g5.8xlarge"}, {}, "us-east-1", "no hourly price for 'ml.g5.8xlarge'"),
    "hyperpod": ({}, {}, "us-east-1", "no hourly price for 'ml.p5.48xlarge' in region 'eu-west-1'"),
    "serverless": ({}, {}, "us-east-1", "no serverless token price for model 'openai-reasoning-gpt-oss-20b'"),
    "sessions": (
        {},
        {"backend_options": {"service": "sagemaker", "base_model": HUB_MODEL, "tokenizer": "Qwen/Qwen3-4B"}},
        "",  # never priced: SageMaker training-session prices are unsourced
        "SageMaker training-session per-token prices are unsourced",
    ),
}


@pytest.fixture
def aws(mocked_aws: None) -> tuple[Any, Any]:
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    create_run_table(dynamodb, "runs")
    s3 = boto3.client("s3", region_name="us-east-1")
    create_versioned_bucket(s3, BUCKET)
    return dynamodb, s3


def _runtime(aws: tuple[Any, Any], backend: str, region: str) -> tuple[Runtime, Recorder]:
    dynamodb, s3 = aws
    deploy, _, _, _ = CASES[backend]
    runtime = Runtime(
        dynamodb=dynamodb,
        s3=s3,
        table="runs",
        bucket=BUCKET,
        settings=PipelineSettings.model_validate({"run_backend": backend}),
        backend_settings={backend: {"region": region, "prefix": "mtrl", **deploy}},
    )
    recorder = Recorder(backend)
    adapters.register_adapter(backend, lambda: recorder)  # type: ignore[arg-type,return-value]
    return runtime, recorder


@pytest.mark.parametrize("backend", sorted(CASES))
def test_a_budgeted_run_that_cannot_be_priced_is_refused_at_preflight_naming_the_run(
    aws: tuple[Any, Any], backend: str
) -> None:
    _, manifest, _, cause = CASES[backend]
    runtime, recorder = _runtime(aws, backend, "eu-west-1")
    try:
        start(runtime, "budgeted", {**manifest, "max_budget_usd": 25})
        with pytest.raises(PreflightFailed) as refused:
            preflight(runtime, {"run_id": "budgeted"})
    finally:
        adapters.unregister_adapter(backend)
    message = str(refused.value)
    assert message.startswith("run budgeted: budget: run budgeted: max_budget_usd 25.0 cannot be enforced")
    assert f"({backend} backend, region eu-west-1)" in message
    assert cause in message
    phase = runtime.registry.get("budgeted")["phases"]["preflight"]
    assert phase["outcome"] == "failed"
    assert [f["check"] for f in phase["findings"] if not f["ok"]] == ["budget"]
    assert recorder.seen == ["preflight"]  # nothing provisioned


@pytest.mark.parametrize("budget", [25, None])
@pytest.mark.parametrize("backend", sorted(b for b, case in CASES.items() if case[2]))
def test_a_budgeted_run_that_can_be_priced_passes_and_an_unbudgeted_run_is_not_priced(
    aws: tuple[Any, Any], backend: str, budget: int | None
) -> None:
    _, manifest, region, _ = CASES[backend]
    runtime, _ = _runtime(aws, backend, region)
    try:
        start(runtime, "run", {**manifest, **({"max_budget_usd": budget} if budget else {})})
        preflight(runtime, {"run_id": "run"})
    finally:
        adapters.unregister_adapter(backend)
    findings = runtime.registry.get("run")["phases"]["preflight"]["findings"]
    budgets = [f for f in findings if f["check"] == "budget"]
    if budget is None:
        assert budgets == []
        return
    (finding,) = budgets
    assert finding["ok"] is True
    assert f"{backend} runs in {region} can be priced" in finding["message"]
