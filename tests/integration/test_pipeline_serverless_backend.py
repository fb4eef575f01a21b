"""The real state machine and handlers driving the real ``serverless`` adapter.

Real: the ASL, every handler, the ``ServerlessAdapter`` — preflight (bucket region, job-role trust from IAM, MLflow
app, model package group, the agent smoke test), dataset conversion into ``runs/<run>/input/``, ``CreateJob``,
``DescribeJob`` polling and teardown — against moto (S3, IAM, STS, SageMaker model package groups) and
model-validated fakes for what moto lacks (``CreateJob``/``DescribeJob``/``StopJob``, ``DescribeMlflowApp`` and the
agent Lambda's answer).
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from io import BytesIO
from typing import Any

from botocore.response import StreamingBody

from mtrl.backends._aws import AwsClients
from mtrl.backends.serverless import ServerlessAdapter
from tests.integration.pipeline_support import BUCKET, Harness, jsonl, pipeline_context, wordle_rows
from tests.unit.backends.aws_fakes import (
    ACCOUNT,
    REGION,
    FakeAws,
    FakeError,
    create_serverless_job_role,
    new_session,
)

DATA = jsonl(wordle_rows(12))
AGENT_ARN = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:mtrl-agent-wordle"
MLFLOW_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:mlflow-app/app-ABC"
WIRING_OK = "ERROR sample failed: An error occurred (ValidationException): 400 Could not find job arn:aws:sagemaker:…"
CROSS_ACCOUNT = "ERROR sample failed: 403 User is not authorized to access this resource"


@dataclass
class ServerlessWorld:
    agent_log: str = WIRING_OK
    job_states: list[tuple[str, str]] = field(
        default_factory=lambda: [("InProgress", "Starting"), ("InProgress", "Training"), ("Completed", "Completed")]
    )
    aws: FakeAws = field(init=False)
    adapter: ServerlessAdapter = field(init=False)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.aws = FakeAws(new_session())
        self.adapter = ServerlessAdapter(AwsClients(self.aws.session), sleep=lambda _s: None)
        self.aws.on("sagemaker", "DescribeMlflowApp", lambda p: {"Arn": p["Arn"], "Status": "Created"})
        self.aws.on("lambda", "Invoke", self._invoke_agent)
        self.aws.on("sagemaker", "CreateJob", self._create_job)
        self.aws.on("sagemaker", "DescribeJob", self._describe_job)
        self.aws.on("sagemaker", "StopJob", self._stop_job)

    def deploy(self) -> dict[str, Any]:
        """What the backends stack creates, and the settings app_builder passes with add_backend_setting."""
        role = create_serverless_job_role(self.aws.session)
        group = self.aws.session.client("sagemaker").create_model_package_group(
            ModelPackageGroupName="mtrl-serverless"
        )["ModelPackageGroupArn"]
        return {
            "prefix": "mtrl",
            "serverless_job_role_arn": role,
            "serverless_agent_lambda_arn": AGENT_ARN,
            "serverless_mlflow_app_arn": MLFLOW_ARN,
            "serverless_model_package_group_arn": group,
            "serverless_accept_eula": "true",
        }

    def _invoke_agent(self, _params: dict[str, Any]) -> dict[str, Any]:
        payload = b'{"reward": -1.5}'
        return {
            "StatusCode": 200,
            "Payload": StreamingBody(BytesIO(payload), len(payload)),
            "LogResult": base64.b64encode(self.agent_log.encode()).decode(),
        }

    def _create_job(self, params: dict[str, Any]) -> dict[str, Any]:
        self.jobs[params["JobName"]] = {"params": params, "polls": 0, "stopped": False}
        return {"JobArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:job/{params['JobCategory']}/{params['JobName']}"}

    def _describe_job(self, params: dict[str, Any]) -> dict[str, Any]:
        job = self.jobs.get(params["JobName"])
        if job is None:
            raise FakeError("ResourceNotFound", "Could not find job")
        if job["stopped"]:
            primary, secondary = "Stopped", "Stopped"
        else:
            primary, secondary = self.job_states[min(job["polls"], len(self.job_states) - 1)]
            job["polls"] += 1
        now = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
        output = {
            "ProgressInfo": {"CurrentStep": job["polls"], "MaxSteps": 3},
            "BillableTokenUsage": {"PrefillTokenCount": 1000, "SampleTokenCount": 500, "TrainTokenCount": 800},
        }
        return {
            "JobName": params["JobName"],
            "JobArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:job/{params['JobCategory']}/{params['JobName']}",
            "RoleArn": job["params"]["RoleArn"],
            "JobCategory": params["JobCategory"],
            "JobConfigSchemaVersion": "1.0.0",
            "JobConfigDocument": json.dumps({"ServiceOutput": output}),
            "CreationTime": now,
            "LastModifiedTime": now,
            "JobStatus": primary,
            "SecondaryStatus": secondary,
            "SecondaryStatusTransitions": [{"Status": secondary, "StartTime": now}],
        }

    def _stop_job(self, params: dict[str, Any]) -> dict[str, Any]:
        self.jobs[params["JobName"]]["stopped"] = True
        return {}


def _pipeline(world: ServerlessWorld) -> Any:
    return pipeline_context(
        world.adapter, backend_name="serverless", backend_settings=world.deploy, run_backend="serverless"
    )


def _assert_finished(pipeline: Harness, run_id: str, status: str) -> dict[str, Any]:
    record = pipeline.record(run_id)
    assert record["status"] == status
    assert all("removed_at" in resource for resource in record.get("resources") or [])
    assert pipeline.slots() == {"holders": {}, "queue": []}
    assert pipeline.object_json(f"runs/{run_id}/summary.json")["status"] == status
    return record


def test_serverless_run_trains_and_finishes() -> None:
    world = ServerlessWorld()
    with _pipeline(world) as pipeline:
        started = pipeline.upload_and_trigger("training-data/sl-ok.jsonl", DATA)
        execution = pipeline.wait(started["execution_arn"])
        assert execution["status"] == "SUCCEEDED", execution
        run_id = started["run_id"]
        record = _assert_finished(pipeline, run_id, "SUCCEEDED")
        (create,) = world.aws.called("CreateJob")
        assert create["JobCategory"] == "AgentRFT"
        document = json.loads(create["JobConfigDocument"])
        assert document["AgentConfig"] == {"CustomAgentLambdaConfig": {"LambdaArn": AGENT_ARN}}
        train = document["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"]
        assert train == f"s3://{BUCKET}/runs/{run_id}/input/train/"  # never under training-data/
        converted = pipeline.s3.get_object(Bucket=BUCKET, Key=f"runs/{run_id}/input/train/data.jsonl")
        rows = [json.loads(line) for line in converted["Body"].read().splitlines()]
        assert len(rows) == 12
        assert set(rows[0]) == {"prompt"}
        assert record["job_id"].endswith(f":job/AgentRFT/{create['JobName']}")
        assert record["progress"]["billable_token_usage"]["TrainTokenCount"] == 800
        assert world.aws.called("StopJob") == []  # a completed job is not stopped
        (smoke,) = world.aws.called("Invoke")
        assert f":{ACCOUNT}:job/AgentRFT/mtrl-smoke-" in smoke["metadata"]["jobArn"]  # a fake job of this account


def test_smoke_test_failure_stops_the_run_before_create_job() -> None:
    world = ServerlessWorld(agent_log=CROSS_ACCOUNT)
    with _pipeline(world) as pipeline:
        started = pipeline.upload_and_trigger("training-data/sl-403.jsonl", DATA)
        execution = pipeline.wait(started["execution_arn"])
        assert execution["error"] == "PreflightFailed"
        assert "agent-smoke-test" in execution["cause"]
        assert "403" in execution["cause"]
        record = _assert_finished(pipeline, started["run_id"], "FAILED")
        assert record["error"]["step"] == "Preflight"
        assert world.aws.called("CreateJob") == []
        assert "Provision" not in pipeline.entered_states(started["execution_arn"])
        (note,) = pipeline.notifications()
        assert "at Preflight" in note["subject"]


def test_serverless_run_timeout_stops_the_job() -> None:
    world = ServerlessWorld(job_states=[("InProgress", "Training")])
    with _pipeline(world) as pipeline:
        started = pipeline.upload_and_trigger("training-data/sl-slow.jsonl", DATA)
        deadline = time.time() + 30
        while not world.aws.called("DescribeJob") and time.time() < deadline:
            time.sleep(0.05)
        pipeline.shift_clock(3600)
        execution = pipeline.wait(started["execution_arn"])
        assert execution["error"] == "RunTimedOut"
        _assert_finished(pipeline, started["run_id"], "TIMED_OUT")
        assert len(world.aws.called("StopJob")) == 1
        assert all(job["stopped"] for job in world.jobs.values())
