"""Where billable token usage is, verified from the installed botocore service model, and read with that shape."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import botocore.session
import pytest
from aws_fakes import ACCOUNT, REGION, FakeAws, new_session
from botocore.validate import ParamValidator

from mtrl.backends._aws import AwsClients
from mtrl.backends.pricing import cost_for_run
from mtrl.backends.serverless.adapter import ServerlessAdapter
from mtrl.backends.serverless.status import TOKEN_COUNTERS, billable_token_usage, job_status_from_description
from mtrl.contracts.backend import JobState, RunContext

MODEL = botocore.session.get_session().get_service_model("sagemaker")
JOB = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:job/AgentRFT/mtrl-x"


def test_describe_job_carries_usage_only_inside_its_config_document() -> None:
    """DescribeJob has no usage member: the service output (with BillableTokenUsage) is the JobConfigDocument string."""
    output = MODEL.operation_model("DescribeJob").output_shape
    assert "BillableTokenUsage" not in output.members
    assert output.members["JobConfigDocument"].type_name == "string"
    assert set(MODEL.shape_for("JobCategory").enum) >= {"AgentRFT", "AgentRFTEvaluation"}


def test_training_session_usage_is_another_resource_with_the_counters_we_read() -> None:
    """DescribeTrainingSession's TrainingSessionDetail.BillableTokenUsage is for CreateTrainingSession sessions, not
    CreateJob jobs; its shape names the counters the job's service output uses."""
    detail = MODEL.operation_model("DescribeTrainingSession").output_shape.members["TrainingSessionDetail"]
    usage = detail.members["BillableTokenUsage"]
    assert set(usage.members) == {spellings[0] for spellings in TOKEN_COUNTERS.values()}
    assert MODEL.operation_model("DescribeTrainingSession").input_shape.required_members == ["TrainingSessionName"]
    assert "JobName" not in MODEL.operation_model("DescribeTrainingSession").input_shape.members


def _usage_shape_example() -> dict[str, int]:
    usage = {"PrefillTokenCount": 491_616_806, "SampleTokenCount": 159_737_098, "TrainingTokenCount": 643_308_554}
    shape = MODEL.operation_model("DescribeTrainingSession").output_shape.members["TrainingSessionDetail"]
    report = ParamValidator().validate(usage, shape.members["BillableTokenUsage"])
    assert not report.has_errors(), report.generate_report()  # the counters as the model spells them
    return usage


def _describe(output: dict[str, Any]) -> dict[str, Any]:
    now = datetime(2026, 11, 29, tzinfo=UTC)
    response = {
        "JobName": "mtrl-x",
        "JobArn": JOB,
        "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/mtrl-serverless-job",
        "JobCategory": "AgentRFT",
        "JobConfigSchemaVersion": "1.0.0",
        "JobConfigDocument": json.dumps({"ServiceOutput": output}),
        "CreationTime": now,
        "LastModifiedTime": now,
        "JobStatus": "InProgress",
        "SecondaryStatus": "Training",
        "SecondaryStatusTransitions": [{"Status": "Training", "StartTime": now}],
    }
    report = ParamValidator().validate(response, MODEL.operation_model("DescribeJob").output_shape)
    assert not report.has_errors(), report.generate_report()
    return response


def test_usage_is_read_from_the_service_output_with_the_models_names() -> None:
    status = job_status_from_description(_describe({"BillableTokenUsage": _usage_shape_example()}))
    assert status.state is JobState.RUNNING
    assert status.progress["billable_token_usage"] == _usage_shape_example()


@pytest.mark.parametrize("train_name", ["TrainingTokenCount", "TrainTokenCount"])
def test_both_spellings_of_the_train_counter_price_the_wordle_run(train_name: str) -> None:
    """The 100-step Wordle run of AWS's hands-on MTRL guide: 338.50 USD. Before the fix, TrainingTokenCount made the
    cost calculator raise, so the budget guard silently saw no cost."""
    usage = {"PrefillTokenCount": 491_616_806, "SampleTokenCount": 159_737_098, train_name: 643_308_554}
    normalized = billable_token_usage({"BillableTokenUsage": usage})
    assert normalized == _usage_shape_example()
    record = {"backend": "serverless", "region": REGION, "model": "gpt-oss-20b", "billable_token_usage": normalized}
    assert str(cost_for_run(record).total) == "338.50"


def test_status_feeds_the_budget_guard_from_the_real_response_shape() -> None:
    aws = FakeAws(new_session())
    aws.on("sagemaker", "DescribeJob", lambda _p: _describe({"BillableTokenUsage": _usage_shape_example()}))
    run = RunContext(
        run_id="r",
        settings={"region": REGION, "serverless_base_model": "openai-reasoning-gpt-oss-20b"},
        dataset_uri="s3://b/training-data/x.jsonl",
        eval_dataset_uri=None,
        output_uri="s3://b/runs/r/",
        resources=(),
        record_resource=lambda _r: None,
    )
    status = ServerlessAdapter(AwsClients(aws.session)).status(run, JOB)
    assert status.metrics["cost_usd"] == pytest.approx(338.50, abs=0.01)
