"""The serverless (AgentRFT) adapter against moto (S3, IAM, STS, Logs) and model-validated fakes (SageMaker jobs,
Lambda/AgentCore invocations)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from io import BytesIO
from typing import Any

import jsonschema
import pytest
from aws_fakes import ACCOUNT, REGION, SERVERLESS_JOB_ROLE, FakeAws, FakeError, Recorder, create_serverless_job_role
from botocore.exceptions import ParamValidationError, ReadTimeoutError
from botocore.response import StreamingBody

from mtrl.backends.pricing import cost_for_run
from mtrl.backends.serverless import adapter as serverless
from mtrl.backends.serverless.adapter import classify_smoke, job_status_from_description
from mtrl.backends.serverless.settings import DEFAULT_BASE_MODEL
from mtrl.contracts.backend import BackendError, CreatedResource, JobState
from tests.unit.backends.serverless.serverless_support import (
    BUCKET,
    MLFLOW_STATUS,
    ROLE_ARN,
    ROWS,
    RUN_ID,
    RUNTIME_ARN,
    SCHEMA,
    adapter,
    lambda_agent,
    make_run,
)


@pytest.fixture
def world(aws: FakeAws) -> FakeAws:
    s3 = aws.session.client("s3")
    s3.create_bucket(Bucket=BUCKET)
    body = "".join(json.dumps(row) + "\n" for row in ROWS).encode()
    s3.put_object(Bucket=BUCKET, Key="training-data/wordle.jsonl", Body=body)
    s3.put_object(Bucket=BUCKET, Key=f"runs/{RUN_ID}/split/eval.jsonl", Body=body)
    create_serverless_job_role(aws.session)
    aws.session.client("sagemaker").create_model_package_group(ModelPackageGroupName="wordle")
    aws.on("sagemaker", "DescribeMlflowApp", lambda p: {"Arn": p["Arn"], "Status": MLFLOW_STATUS["status"]})
    MLFLOW_STATUS["status"] = "Created"
    return aws


# -- provision / submit / status / cancel / cleanup ----------------------------------------------------------------


def test_provision_writes_service_format_under_the_run_prefix_only(world: FakeAws) -> None:
    s3 = world.session.client("s3")
    before = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="training-data/")["Contents"]}
    assert adapter(world).provision(make_run()) == []
    lines = s3.get_object(Bucket=BUCKET, Key=f"runs/{RUN_ID}/input/train/data.jsonl")["Body"].read().splitlines()
    assert [json.loads(json.loads(line)["prompt"])["answer"] for line in lines] == ["riser", "swoon"]
    assert all(set(json.loads(line)) == {"prompt"} for line in lines)
    for channel in ("validation", "evaluation"):
        s3.head_object(Bucket=BUCKET, Key=f"runs/{RUN_ID}/input/{channel}/data.jsonl")
    after = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="training-data/")["Contents"]}
    assert after == before


def test_provision_rejects_non_json_lines(world: FakeAws) -> None:
    world.session.client("s3").put_object(Bucket=BUCKET, Key="training-data/wordle.jsonl", Body=b'{"id": 1}\nnope\n')
    with pytest.raises(BackendError, match="line 2: not valid JSON"):
        adapter(world).provision(make_run())


def test_submit_records_then_creates_a_valid_agent_rft_job(world: FakeAws) -> None:
    recorder = Recorder()
    seen_before_create: list[int] = []

    def create_job(params: dict[str, Any]) -> dict[str, Any]:
        seen_before_create.append(len(recorder.resources))
        return {"JobArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:job/AgentRFT/{params['JobName']}"}

    world.on("sagemaker", "CreateJob", create_job)
    job_arn = adapter(world).submit(make_run(recorder))
    (params,) = world.called("CreateJob")
    assert seen_before_create == [1]
    assert recorder.resources[0] == CreatedResource(
        "sagemaker-job", params["JobName"], {"category": "AgentRFT", "region": REGION, "base_model": DEFAULT_BASE_MODEL}
    )
    assert params["JobCategory"] == "AgentRFT"
    assert params["JobConfigSchemaVersion"] == "1.0.0"
    assert params["RoleArn"] == ROLE_ARN
    document = json.loads(params["JobConfigDocument"])
    jsonschema.validate(document, SCHEMA)
    assert document["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] == (
        f"s3://{BUCKET}/runs/{RUN_ID}/input/train/"
    )
    assert document["OutputDataConfig"]["S3OutputPath"] == f"s3://{BUCKET}/runs/{RUN_ID}/model/"
    assert job_arn.endswith(f"job/AgentRFT/{params['JobName']}")


def test_submit_retry_after_lost_response_returns_the_existing_job(world: FakeAws) -> None:
    existing = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:job/AgentRFT/mtrl-{RUN_ID}"

    def create_job(_params: dict[str, Any]) -> dict[str, Any]:
        raise FakeError("ResourceInUse", "Job already exists")

    world.on("sagemaker", "CreateJob", create_job)
    world.on("sagemaker", "DescribeJob", lambda p: describe(p["JobName"], "InProgress", "Training"))
    assert adapter(world).submit(make_run()) == existing


def test_submit_validation_error_is_not_transient(world: FakeAws) -> None:
    def create_job(_params: dict[str, Any]) -> dict[str, Any]:
        raise FakeError("ValidationException", "JobConfigDocument failed schema validation")

    world.on("sagemaker", "CreateJob", create_job)
    with pytest.raises(BackendError, match="schema validation") as caught:
        adapter(world).submit(make_run())
    assert caught.value.transient is False


def describe(
    name: str, status: str, secondary: str, service_output: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    now = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    document = json.dumps({"ServiceOutput": service_output}) if service_output else None
    response = {
        "JobName": name,
        "JobArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:job/AgentRFT/{name}",
        "RoleArn": ROLE_ARN,
        "JobCategory": "AgentRFT",
        "JobConfigSchemaVersion": "1.0.0",
        "CreationTime": now,
        "LastModifiedTime": now,
        "JobStatus": status,
        "SecondaryStatus": secondary,
        "SecondaryStatusTransitions": [{"Status": secondary, "StartTime": now}],
        **extra,
    }
    if document:
        response["JobConfigDocument"] = document
    return response


def test_status_reports_progress_usage_outputs_and_feeds_cost(world: FakeAws) -> None:
    output = {
        "ProgressInfo": {"MaxEpoch": 20, "StepsPerEpoch": 5, "CurrentEpoch": 3, "CurrentStep": 12},
        "BillableTokenUsage": {
            "PrefillTokenCount": 491616806,
            "SampleTokenCount": 159737098,
            "TrainTokenCount": 643308554,
        },
        "OutputModelPackageArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package/wordle/3",
        "MlflowDetails": {"ExperimentName": "mtrl", "RunId": "r-1"},
    }
    world.on("sagemaker", "DescribeJob", lambda p: describe(p["JobName"], "Completed", "Completed", output))
    status = adapter(world).status(make_run(), f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:job/AgentRFT/mtrl-x")
    assert status.state is JobState.SUCCEEDED
    assert status.progress["step"] == 12
    assert status.progress["total_steps"] == 100
    assert status.outputs == {
        "model_package_arn": output["OutputModelPackageArn"],
        "mlflow_experiment_name": "mtrl",
        "mlflow_run_id": "r-1",
    }
    record = {
        "backend": "serverless",
        "region": REGION,
        "model": "openai-reasoning-gpt-oss-20b",
        "billable_token_usage": status.progress["billable_token_usage"],
    }
    assert str(cost_for_run(record).total) == "338.50"


@pytest.mark.parametrize(
    ("primary", "secondary", "state"),
    [
        ("InProgress", "Starting", JobState.PENDING),
        ("InProgress", "Training", JobState.RUNNING),
        ("Stopping", "Stopping", JobState.RUNNING),
        ("Stopped", "Stopped", JobState.STOPPED),
        ("Failed", "Failed", JobState.FAILED),
    ],
)
def test_status_mapping(primary: str, secondary: str, state: JobState) -> None:
    assert job_status_from_description(describe("j", primary, secondary)).state is state


def test_failed_status_carries_the_reason_and_eval_metrics() -> None:
    job = describe(
        "j",
        "Failed",
        "Failed",
        {"EvaluationMetrics": {"eval/reward/pass_at_1": 0.37, "eval/reward/mean": 0.14, "note": "x"}},
        FailureReason="The agent signaled that the trajectory failed",
    )
    status = job_status_from_description(job)
    assert status.message == "The agent signaled that the trajectory failed"
    assert status.metrics == {"eval/reward/pass_at_1": 0.37, "eval/reward/mean": 0.14}


def test_cancel_stops_a_running_job_but_not_a_finished_one(world: FakeAws) -> None:
    states = {"mtrl-a": "InProgress", "mtrl-b": "Completed"}
    world.on("sagemaker", "DescribeJob", lambda p: describe(p["JobName"], states[p["JobName"]], "Training"))
    world.on("sagemaker", "StopJob", lambda _p: {})
    backend = adapter(world)
    for name in states:
        backend.cancel(make_run(), f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:job/AgentRFT/{name}")
    assert [p["JobName"] for p in world.called("StopJob")] == ["mtrl-a"]


def test_evaluation_job_and_cleanup_is_idempotent(world: FakeAws) -> None:
    recorder = Recorder()
    jobs: dict[str, str] = {}

    def create_job(params: dict[str, Any]) -> dict[str, Any]:
        jobs[params["JobName"]] = "InProgress"
        return {"JobArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:job/{params['JobCategory']}/{params['JobName']}"}

    def describe_job(params: dict[str, Any]) -> dict[str, Any]:
        if params["JobName"] not in jobs:
            raise FakeError("ResourceNotFound", "Could not find job")
        return describe(params["JobName"], jobs[params["JobName"]], "Evaluating")

    def stop_job(params: dict[str, Any]) -> dict[str, Any]:
        jobs[params["JobName"]] = "Stopped"
        return {}

    world.on("sagemaker", "CreateJob", create_job)
    world.on("sagemaker", "DescribeJob", describe_job)
    world.on("sagemaker", "StopJob", stop_job)
    backend = adapter(world)
    eval_arn = backend.submit_evaluation(make_run(recorder))
    assert ":job/AgentRFTEvaluation/mtrl-eval-" in eval_arn
    jsonschema.validate(json.loads(world.called("CreateJob")[0]["JobConfigDocument"]), SCHEMA)
    recorder.resources.append(CreatedResource("sagemaker-job", "mtrl-never-created", {"category": "AgentRFT"}))
    run = make_run(recorder)
    first = backend.cleanup(run)
    second = backend.cleanup(run)
    assert first == second == recorder.resources
    assert len(world.called("StopJob")) == 1
    assert set(jobs.values()) == {"Stopped"}


def test_evaluation_needs_an_eval_split(world: FakeAws) -> None:
    with pytest.raises(BackendError, match="eval split"):
        adapter(world).submit_evaluation(make_run(eval_split=False))


# -- preflight ---------------------------------------------------------------------------------------------------


def test_preflight_passes_with_wiring_ok(world: FakeAws) -> None:
    lambda_agent(world, "ERROR sample failed: 400 Could not find job arn:aws:sagemaker:...:job/AgentRFT/mtrl-smoke")
    findings = adapter(world).preflight(make_run())
    assert all(f.ok for f in findings), findings
    assert [f.check for f in findings][-1] == "agent-smoke-test"
    (invoke,) = world.called("Invoke")
    job_arn = invoke["metadata"]["jobArn"]
    assert job_arn.startswith(f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:job/AgentRFT/mtrl-smoke-")  # this account
    assert json.loads(invoke["prompt"])["answer"] == "riser"  # a real task from the dataset
    assert world.called("CreateJob") == []


@pytest.mark.parametrize(
    ("log_text", "outcome", "fragment"),
    [
        ("botocore: An error occurred (403): not authorized to access this resource", "cross_account", "403"),
        ("Task timed out after 30.03 seconds", "timeout", "HTTP server never started"),
        ("Traceback: KeyError 'answer'", "other", "Traceback: KeyError 'answer'"),
    ],
)
def test_smoke_test_failures_stop_preflight(world: FakeAws, log_text: str, outcome: str, fragment: str) -> None:
    lambda_agent(world, log_text)
    backend = adapter(world)
    assert backend.smoke_test(make_run()).outcome == outcome
    smoke = adapter(world).preflight(make_run())[-1]
    assert smoke.check == "agent-smoke-test"
    assert not smoke.ok
    assert fragment in smoke.message


def test_smoke_test_client_timeout(world: FakeAws) -> None:
    def invoke(_params: dict[str, Any]) -> dict[str, Any]:
        raise ReadTimeoutError(endpoint_url="https://lambda.us-east-1.amazonaws.com")

    world.on("lambda", "Invoke", invoke)
    result = adapter(world).smoke_test(make_run())
    assert result.outcome == "timeout"
    assert "30 s" in result.message


def test_agentcore_smoke_test_reads_the_runtime_logs(world: FakeAws) -> None:
    group = "/aws/bedrock-agentcore/runtimes/Wordle_Wordle-abc123-DEFAULT"
    logs = world.session.client("logs")
    logs.create_log_group(logGroupName=group)
    logs.create_log_stream(logGroupName=group, logStreamName="s")
    now_ms = int(datetime.now(tz=UTC).timestamp() * 1000)
    logs.put_log_events(
        logGroupName=group,
        logStreamName="s",
        logEvents=[{"timestamp": now_ms + 1000, "message": "ValidationException (400): Could not find job"}],
    )

    def invoke(params: dict[str, Any]) -> dict[str, Any]:
        assert len(params["__headers__"]["X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"]) >= 33
        body = b'{"reward": -1.5}'
        return {
            "response": StreamingBody(BytesIO(body), len(body)),
            "contentType": "application/json",
            "statusCode": 200,
        }

    world.on("bedrock-agentcore", "InvokeAgentRuntime", invoke)
    run = make_run(agent_runtime_arn=RUNTIME_ARN)
    assert adapter(world).smoke_test(run).ok


def test_classify_prefers_not_found_over_other_noise() -> None:
    arn = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:job/AgentRFT/x"
    assert classify_smoke(
        "timeout retry... then 400 Could not find job", timed_out=False, job_arn=arn, timeout_seconds=30
    ).ok
    assert classify_smoke("", timed_out=True, job_arn=arn, timeout_seconds=30).outcome == "timeout"
    assert classify_smoke("", timed_out=False, job_arn=arn, timeout_seconds=30).message.endswith("(empty)")


@pytest.mark.parametrize(
    ("trust", "fragment"),
    [
        (
            {"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}, "Action": "sts:AssumeRole"},
            "trusts sagemaker.amazonaws.com",
        ),
        (
            {"Effect": "Allow", "Principal": {"Service": "job.sagemaker.amazonaws.com"}, "Action": "sts:AssumeRole"},
            "sts:TagSession",
        ),
    ],
)
def test_preflight_role_trust(world: FakeAws, trust: dict[str, Any], fragment: str) -> None:
    iam = world.session.client("iam")
    iam.update_assume_role_policy(
        RoleName=SERVERLESS_JOB_ROLE, PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [trust]})
    )
    findings = {f.check: f for f in adapter(world).preflight(make_run())}
    assert not findings["job-role-trust"].ok
    assert fragment in findings["job-role-trust"].message
    assert "agent-smoke-test" not in findings  # no invocation when the basics are wrong
    assert world.called("Invoke") == []


def test_preflight_region_mismatch_and_eula(world: FakeAws) -> None:
    run = make_run(
        serverless_agent_lambda_arns=[f"wordle=arn:aws:lambda:us-west-2:{ACCOUNT}:function:agent"],
        serverless_accept_eula=False,
    )
    findings = {f.check: f for f in adapter(world).preflight(run)}
    assert not findings["region"].ok
    assert "agent in us-west-2" in findings["region"].message
    assert not findings["eula"].ok


def test_preflight_bad_settings_is_one_clear_finding(world: FakeAws) -> None:
    findings = adapter(world).preflight(make_run(serverless_job_role_arn=None))
    assert len(findings) == 1
    assert not findings[0].ok
    assert "serverless_job_role_arn" in findings[0].message


def test_unknown_hyperparameters_are_refused_before_any_call(world: FakeAws) -> None:
    lambda_agent(world, "400 Could not find job")
    findings = adapter(world).preflight(make_run(hyperparameters={"kl_coef": 0.1}))
    assert [(f.check, f.ok) for f in findings] == [("settings", False)]
    assert "kl_coef" in findings[0].message
    assert world.called("Invoke") == []


def test_status_adds_cost_for_the_budget_guard(world: FakeAws) -> None:
    usage = {"PrefillTokenCount": 1_000_000, "SampleTokenCount": 0, "TrainTokenCount": 1_000_000}
    world.on(
        "sagemaker",
        "DescribeJob",
        lambda p: describe(p["JobName"], "InProgress", "Training", {"BillableTokenUsage": usage}),
    )
    job = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:job/AgentRFT/mtrl-x"
    assert adapter(world).status(make_run(), job).metrics["cost_usd"] == 0.48
    unpriced = adapter(world).status(make_run(serverless_base_model="nova-textgeneration-lite-v2"), job)
    assert "cost_usd" not in unpriced.metrics  # no price known: no made-up cost


def test_evaluate_submits_on_the_trained_package_then_returns_metrics(world: FakeAws) -> None:
    recorder = Recorder()
    package = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package/wordle/7"
    jobs: dict[str, str] = {}

    def create_job(params: dict[str, Any]) -> dict[str, Any]:
        jobs[params["JobName"]] = "InProgress"
        return {"JobArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:job/{params['JobCategory']}/{params['JobName']}"}

    def describe_job(params: dict[str, Any]) -> dict[str, Any]:
        name = params["JobName"]
        if params["JobCategory"] == "AgentRFT":
            return describe(name, "Completed", "Completed", {"OutputModelPackageArn": package})
        output = {"EvaluationMetrics": {"eval/reward/pass_at_1": 0.69}} if jobs[name] == "Completed" else None
        return describe(name, jobs[name], "Evaluating", output)

    world.on("sagemaker", "CreateJob", create_job)
    world.on("sagemaker", "DescribeJob", describe_job)
    recorder.resources.append(CreatedResource("sagemaker-job", f"mtrl-{RUN_ID}", {"category": "AgentRFT"}))
    backend = adapter(world)
    with pytest.raises(BackendError, match="submitted") as caught:
        backend.evaluate(make_run(recorder))
    assert caught.value.transient
    document = json.loads(world.called("CreateJob")[0]["JobConfigDocument"])
    assert document["ModelPackageConfig"] == {"InputModelPackageArn": package}
    with pytest.raises(BackendError, match="InProgress") as caught:
        backend.evaluate(make_run(recorder))
    assert caught.value.transient
    jobs.update(dict.fromkeys(jobs, "Completed"))
    assert backend.evaluate(make_run(recorder)) == {"eval/reward/pass_at_1": 0.69}
    assert len(world.called("CreateJob")) == 1


def test_preflight_requires_a_ready_mlflow_app_and_the_package_group(world: FakeAws) -> None:
    MLFLOW_STATUS["status"] = "Creating"
    findings = {f.check: f for f in adapter(world).preflight(make_run())}
    assert not findings["mlflow-and-model-packages"].ok
    assert "MLflow app is Creating" in findings["mlflow-and-model-packages"].message
    MLFLOW_STATUS["status"] = "Created"
    other_group = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package-group/missing"
    findings = {f.check: f for f in adapter(world).preflight(make_run(serverless_model_package_group_arn=other_group))}
    assert not findings["mlflow-and-model-packages"].ok
    assert "model package group" in findings["mlflow-and-model-packages"].message


def test_the_fake_service_rejects_requests_and_responses_the_model_does_not_allow(aws: FakeAws) -> None:
    # The harness itself: botocore validates the request before the fake sees it, the fake validates its answer.
    aws.on("sagemaker", "StopJob", lambda _p: {})
    aws.on("sagemaker", "DescribeJob", lambda p: {"JobName": p["JobName"]})  # missing required output fields
    sagemaker = aws.session.client("sagemaker")
    with pytest.raises(ParamValidationError, match="JobCategory"):
        sagemaker.stop_job(JobName="mtrl-x")  # a required member missing (botocore checks types/required, not enums)
    with pytest.raises(AssertionError, match="fake DescribeJob response is invalid"):
        sagemaker.describe_job(JobName="mtrl-x", JobCategory="AgentRFT")


@pytest.mark.parametrize("run_id", ["wordle", "x" * 200, "Wordle_v3.2026-11-29T10:30:00Z", "--a--b--"])
def test_job_names_match_the_service_pattern(run_id: str) -> None:
    # botocore does not check patterns, so check them here against the service model's own pattern.
    import re

    import botocore.session

    shape = botocore.session.get_session().get_service_model("sagemaker").shape_for("JobName")
    for evaluation in (False, True):
        name = serverless.job_name_for(run_id, evaluation=evaluation)
        assert re.fullmatch(shape.metadata["pattern"], name), name
        assert len(name) <= shape.metadata["max"]


@pytest.mark.parametrize(
    ("payload", "outcome"),
    [
        (b'{"reward": -1.5, "diagnosis": "job not found (expected for the fake-job-ARN smoke test)"}', "ok"),
        (
            b'{"reward": -1.5, "diagnosis": "access denied: the job ARN names another account, or the role lacks '
            b'AmazonSageMakerJobRuntimeAccess"}',
            "cross_account",
        ),
    ],
)
def test_smoke_test_understands_our_agent_lambdas_diagnosis(world: FakeAws, payload: bytes, outcome: str) -> None:
    lambda_agent(world, "START RequestId: 1\nEND RequestId: 1", payload=payload)
    assert adapter(world).smoke_test(make_run()).outcome == outcome
