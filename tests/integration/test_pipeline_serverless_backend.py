"""The real state machine and handlers driving the real ``serverless`` adapter.

Real: the ASL, every handler, the ``ServerlessAdapter`` — preflight (bucket region, job-role trust from IAM, MLflow
app, model package group, the region/model table, the run's agent, the agent smoke test), dataset conversion into
``runs/<run>/input/``, ``CreateJob``, ``DescribeJob`` polling, the evaluation wait loop and teardown — against moto
(S3, IAM, STS, Logs, SageMaker model package groups) and model-validated fakes for what moto lacks
(``CreateJob``/``DescribeJob``/``StopJob``, ``DescribeMlflowApp``, the Lambda and AgentCore invocations). The agent
Lambdas' answers come from the real agent handler (``lambda/serverless_agent``) loaded with each function's
environment, whose ``sagemakerjobruntime`` calls are answered like the service answers a fake job ARN.

Every AWS call the adapter and the agent make is recorded (``aws_calls.AwsCallRecorder``) and checked against the
calls their policies are known to grant.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path
from typing import Any, Literal
from unittest import mock

import pytest
from botocore.exceptions import ReadTimeoutError
from botocore.response import StreamingBody

from mtrl.backends._aws import AwsClients
from mtrl.backends.serverless.adapter import ServerlessAdapter
from mtrl.validation.dataset import eval_split_of
from mtrl.worker import serverless_agent
from tests.integration.moto_speedups import handler_module
from tests.integration.pipeline_support import BUCKET, Harness, jsonl, pipeline_context, wordle_rows
from tests.unit.backends.aws_calls import AGENT_ACTIONS, SERVERLESS_ADAPTER_ACTIONS, AwsCallRecorder
from tests.unit.backends.aws_fakes import (
    ACCOUNT,
    REGION,
    FakeAws,
    FakeError,
    create_serverless_job_role,
    new_session,
)

REPO = Path(__file__).resolve().parents[2]
DATA = jsonl(wordle_rows(12))
ASK_TO_CODE = (REPO / "environments" / "ask_to_code" / "sample" / "train.jsonl").read_bytes()
MLFLOW_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:mlflow-app/app-ABC"
RUNTIME_ID = "Wordle_Wordle-abc123"
RUNTIME_ARN = f"arn:aws:bedrock-agentcore:{REGION}:{ACCOUNT}:runtime/{RUNTIME_ID}"
PACKAGE_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package/mtrl-serverless/1"
# How the job runtime answers an agent sampling a fake job ARN (the smoke test of AWS's hands-on MTRL guide).
Answer = Literal["wired", "cross_account", "timeout"]
_ENV_LOCK = threading.Lock()


def agent_arn(env_id: str) -> str:
    return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:mtrl-agent-{env_id}"


@dataclass
class ServerlessWorld:
    answer: Answer = "wired"
    environments: tuple[str, ...] = ("wordle", "ask_to_code")
    job_states: list[tuple[str, str]] = field(
        default_factory=lambda: [("InProgress", "Starting"), ("InProgress", "Training"), ("Completed", "Completed")]
    )
    eval_states: list[tuple[str, str]] = field(
        default_factory=lambda: [("InProgress", "Evaluating")] * 6 + [("Completed", "Completed")]
    )
    extra_settings: dict[str, Any] = field(default_factory=dict)
    calls: AwsCallRecorder = field(default_factory=AwsCallRecorder)
    aws: FakeAws = field(init=False)
    runtime: FakeAws = field(init=False)
    adapter: ServerlessAdapter = field(init=False)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    invoked: list[tuple[str, str]] = field(default_factory=list)  # (function or runtime ARN, env the agent played)

    def __post_init__(self) -> None:
        self.aws = FakeAws(new_session())
        self.calls.attach(self.aws.session, "backend")
        self.adapter = ServerlessAdapter(AwsClients(self.aws.session), sleep=lambda _s: None, log_wait_attempts=1)
        self.aws.on("sagemaker", "DescribeMlflowApp", lambda p: {"Arn": p["Arn"], "Status": "Created"})
        self.aws.on("lambda", "Invoke", self._invoke_agent_lambda)
        self.aws.on("bedrock-agentcore", "InvokeAgentRuntime", self._invoke_agentcore)
        self.aws.on("sagemaker", "CreateJob", self._create_job)
        self.aws.on("sagemaker", "DescribeJob", self._describe_job)
        self.aws.on("sagemaker", "StopJob", self._stop_job)
        # The job runtime the agent Lambda's handler talks to.
        self.runtime = FakeAws(new_session())
        self.calls.attach(self.runtime.session, "agent")
        self.runtime.on("sagemakerjobruntime", "Sample", self._sample)

    def deploy(self) -> dict[str, Any]:
        """What the backends stack creates, and the values serverless's stack side ships (stacks/backends/)."""
        setup = new_session()  # not the adapter's session: these calls are not the adapter's
        role = create_serverless_job_role(setup)
        group = setup.client("sagemaker").create_model_package_group(ModelPackageGroupName="mtrl-serverless")[
            "ModelPackageGroupArn"
        ]
        setup.client("logs").create_log_group(logGroupName=f"/aws/bedrock-agentcore/runtimes/{RUNTIME_ID}-DEFAULT")
        return {
            "prefix": "mtrl",
            "serverless_job_role_arn": role,
            "serverless_agent_lambda_arns": [f"{env}={agent_arn(env)}" for env in self.environments],
            "serverless_mlflow_app_arn": MLFLOW_ARN,
            "serverless_model_package_group_arn": group,
            "serverless_base_model": "openai-reasoning-gpt-oss-20b",
            "serverless_accept_eula": True,
            **self.extra_settings,
        }

    # -- the agents --------------------------------------------------------------------------------------------
    def _invoke_agent_lambda(self, params: dict[str, Any]) -> dict[str, Any]:
        """The deployed agent function: the real handler with the function's MTRL_ENV_ID."""
        function = params["__uri__"].split("/functions/")[1].split("/")[0]
        function = function.replace("%3A", ":")
        env_id = function.rsplit("mtrl-agent-", 1)[1]
        if self.answer == "timeout":
            self.invoked.append((function, env_id))
            raise ReadTimeoutError(endpoint_url=f"https://lambda.{REGION}.amazonaws.com")
        handler = handler_module("serverless_agent")
        with _ENV_LOCK:
            saved = os.environ.get("MTRL_ENV_ID")
            os.environ["MTRL_ENV_ID"] = env_id
            client = self.runtime.session.client("sagemakerjobruntime", region_name=REGION)
            try:
                with mock.patch.object(serverless_agent, "job_runtime_client", return_value=client):
                    payload = {key: value for key, value in params.items() if not key.startswith("__")}
                    result = handler.handler(payload, None)
            finally:
                if saved is None:
                    os.environ.pop("MTRL_ENV_ID", None)
                else:
                    os.environ["MTRL_ENV_ID"] = saved
        self.invoked.append((function, env_id))
        body = json.dumps(result).encode()
        return {"StatusCode": 200, "Payload": StreamingBody(BytesIO(body), len(body))}

    def _sample(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.answer == "cross_account":
            raise FakeError("AccessDeniedException", "User is not authorized to access this resource", 403)
        raise FakeError("ValidationException", f"Could not find job {params.get('JobArn', '')}", 400)

    def _invoke_agentcore(self, params: dict[str, Any]) -> dict[str, Any]:
        """An AgentCore runtime: the agent writes the job runtime's answer to its log group and returns a reward."""
        self.invoked.append((RUNTIME_ARN, "agentcore"))
        if self.answer == "timeout":
            raise ReadTimeoutError(endpoint_url=f"https://bedrock-agentcore.{REGION}.amazonaws.com")
        message = {
            "wired": "ERROR sample failed: An error occurred (ValidationException): 400 Could not find job",
            "cross_account": "ERROR sample failed: 403 User is not authorized to access this resource",
        }[self.answer]
        logs = new_session().client("logs")  # the runtime writes its own logs
        group = f"/aws/bedrock-agentcore/runtimes/{RUNTIME_ID}-DEFAULT"
        stream = f"smoke-{len(self.invoked)}"
        logs.create_log_stream(logGroupName=group, logStreamName=stream)
        logs.put_log_events(
            logGroupName=group,
            logStreamName=stream,
            logEvents=[{"timestamp": int(time.time() * 1000) + 1000, "message": message}],
        )
        body = b'{"reward": -1.5}'
        return {
            "response": StreamingBody(BytesIO(body), len(body)),
            "contentType": "application/json",
            "statusCode": 200,
        }

    # -- the jobs ----------------------------------------------------------------------------------------------
    def _create_job(self, params: dict[str, Any]) -> dict[str, Any]:
        self.jobs[params["JobName"]] = {"params": params, "polls": 0, "stopped": False}
        return {"JobArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:job/{params['JobCategory']}/{params['JobName']}"}

    def _describe_job(self, params: dict[str, Any]) -> dict[str, Any]:
        job = self.jobs.get(params["JobName"])
        if job is None:
            raise FakeError("ResourceNotFound", "Could not find job")
        evaluation = params["JobCategory"] == "AgentRFTEvaluation"
        states = self.eval_states if evaluation else self.job_states
        if job["stopped"]:
            primary, secondary = "Stopped", "Stopped"
        else:
            primary, secondary = states[min(job["polls"], len(states) - 1)]
            job["polls"] += 1
        now = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
        # The service's output inside JobConfigDocument; counters spelled as botocore's BillableTokenUsage shape.
        output: dict[str, Any] = {
            "BillableTokenUsage": {
                "PrefillTokenCount": 10_000_000,
                "SampleTokenCount": 5_000_000,
                "TrainingTokenCount": 8_000_000,
            },
        }
        if evaluation and params["JobName"].startswith("mtrl-base-"):  # the base model scores lower
            output["EvaluationMetrics"] = {"eval/reward/pass_at_1": 0.125, "eval/reward/mean": 0.0625}
        elif evaluation:
            output["EvaluationMetrics"] = {"eval/reward/pass_at_1": 0.5, "eval/reward/mean": 0.25}
        else:
            output["ProgressInfo"] = {"CurrentStep": job["polls"], "MaxSteps": 3}
            output["OutputModelPackageArn"] = PACKAGE_ARN
        response = {
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
        if primary == "Failed":
            response["FailureReason"] = "ClientError: the agent signaled that the trajectory failed"
        return response

    def _stop_job(self, params: dict[str, Any]) -> dict[str, Any]:
        self.jobs[params["JobName"]]["stopped"] = True
        return {}

    def created(self, category: str) -> list[dict[str, Any]]:
        return [params for params in self.aws.called("CreateJob") if params["JobCategory"] == category]

    def assert_calls_are_the_documented_ones(self) -> None:
        assert self.calls.actions("backend") <= SERVERLESS_ADAPTER_ACTIONS, self.calls.to_json()
        assert self.calls.actions("agent") <= AGENT_ACTIONS, self.calls.to_json()


def _pipeline(world: ServerlessWorld) -> Any:
    return pipeline_context(
        world.adapter,
        backend_name="serverless",
        backend_settings=world.deploy,
        run_backend="serverless",
        # The operator lists the AgentCore runtimes a manifest may name (issue 20 item 6).
        run_allowed_agent_runtime_arns=[RUNTIME_ARN],
    )


def _assert_finished(pipeline: Harness, run_id: str, status: str) -> dict[str, Any]:
    record = pipeline.record(run_id)
    assert record["status"] == status
    assert all("removed_at" in resource for resource in record.get("resources") or [])
    assert pipeline.slots() == {"holders": {}, "queue": []}
    assert pipeline.object_json(f"runs/{run_id}/summary.json")["status"] == status
    return record


def _run(
    pipeline: Harness, name: str, data: bytes, manifest: dict[str, Any] | None = None
) -> tuple[str, dict[str, Any]]:
    if manifest is not None:
        pipeline.put(f"training-data/{name}.run.json", json.dumps(manifest).encode())
    started = pipeline.upload_and_trigger(f"training-data/{name}.jsonl", data)
    return started["run_id"], pipeline.wait(started["execution_arn"], timeout=120)


def test_serverless_run_trains_evaluates_over_many_polls_and_finishes() -> None:
    world = ServerlessWorld()
    with _pipeline(world) as pipeline:
        pipeline.put("eval-data/held-out.jsonl", jsonl(wordle_rows(4, start=100)))
        manifest = {
            "eval_dataset": "eval-data/held-out.jsonl",
            "hyperparameters": {"group_size": 4, "learning_rate": 1e-5, "lora_rank": 32, "max_steps": 3},
            "backend_options": {
                "reasoning_effort": "medium",
                "intermediate_checkpoints": True,
                "notifications": "failures",
            },
        }
        run_id, execution = _run(pipeline, "sl-ok", DATA, manifest)
        assert execution["status"] == "SUCCEEDED", execution
        record = _assert_finished(pipeline, run_id, "SUCCEEDED")
        (create,) = world.created("AgentRFT")
        document = json.loads(create["JobConfigDocument"])
        assert document["AgentConfig"] == {"CustomAgentLambdaConfig": {"LambdaArn": agent_arn("wordle")}}
        assert document["TrainingConfig"]["HyperParameters"] == {
            "group_size": "4",
            "learning_rate": "1e-05",
            "lora_rank": "32",
            "max_steps": "3",
        }
        group = document["ModelPackageConfig"]["OutputModelPackageGroupArn"]
        assert document["ModelPackageConfig"]["IntermediateCheckpointModelPackageGroupArn"] == group
        train = document["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"]
        assert train == f"s3://{BUCKET}/runs/{run_id}/input/train/"  # never under training-data/
        converted = pipeline.s3.get_object(Bucket=BUCKET, Key=f"runs/{run_id}/input/train/data.jsonl")
        rows = [json.loads(line) for line in converted["Body"].read().splitlines()]
        assert len(rows) == 12
        assert json.loads(rows[0]["prompt"])["mtrl_agent"] == {"reasoning_effort": "medium"}
        assert record["job_id"].endswith(f":job/AgentRFT/{create['JobName']}")
        assert record["progress"]["billable_token_usage"]["TrainingTokenCount"] == 8_000_000
        # The budget guard sees the cost of the real response shape: 10 M x 0.12 + 5 M x 0.30 + 8 M x 0.36 per M.
        assert record["cost"]["usd"] == pytest.approx(5.58)
        # The evaluation: its own category, flat strings, on the trained package, waited for over many polls.
        (evaluation,) = world.created("AgentRFTEvaluation")
        eval_doc = json.loads(evaluation["JobConfigDocument"])
        assert eval_doc["ModelPackageConfig"] == {"InputModelPackageArn": PACKAGE_ARN}
        assert all(isinstance(v, str) for v in eval_doc["EvaluationConfig"]["HyperParameters"].values())
        polls = [p for p in world.aws.called("DescribeJob") if p["JobCategory"] == "AgentRFTEvaluation"]
        assert len(polls) >= 7
        entered = pipeline.entered_states(pipeline.executions()[0]["executionArn"])
        assert entered.count("WaitForEvaluation") >= 6
        summary = pipeline.object_json(f"runs/{run_id}/summary.json")
        assert summary["evaluation"] == {"eval/reward/pass_at_1": 0.5, "eval/reward/mean": 0.25}
        assert summary["evaluation_settings"]["temperature"].startswith("service default (documented: 1")
        assert summary["evaluation_settings"]["pass_k_values"] == "[1]"
        assert world.aws.called("StopJob") == []  # completed jobs are not stopped
        (smoke,) = world.aws.called("Invoke")
        assert smoke["metadata"]["jobArn"].startswith(f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:job/AgentRFT/mtrl-smoke-")
        assert world.invoked == [(agent_arn("wordle"), "wordle")]
        assert pipeline.notifications() == []  # notifications=failures: a success publishes nothing
        world.assert_calls_are_the_documented_ones()


def test_a_baseline_evaluation_of_the_base_model_runs_before_training_and_is_reported_beside_the_score() -> None:
    world = ServerlessWorld(eval_states=[("InProgress", "Evaluating")] * 3 + [("Completed", "Completed")])
    with _pipeline(world) as pipeline:
        pipeline.put("eval-data/held-out.jsonl", jsonl(wordle_rows(4, start=100)))
        manifest = {"eval_dataset": "eval-data/held-out.jsonl", "baseline_evaluation": True}
        run_id, execution = _run(pipeline, "sl-base", DATA, manifest)
        assert execution["status"] == "SUCCEEDED", execution
        record = _assert_finished(pipeline, run_id, "SUCCEEDED")
        # Order of the jobs: the base model's evaluation, then training, then the trained model's evaluation.
        created = [(p["JobCategory"], p["JobName"]) for p in world.aws.called("CreateJob")]
        assert [category for category, _ in created] == ["AgentRFTEvaluation", "AgentRFT", "AgentRFTEvaluation"]
        assert created[0][1].startswith("mtrl-base-")
        assert created[2][1].startswith("mtrl-eval-")
        base_doc, _, after_doc = (json.loads(p["JobConfigDocument"]) for p in world.aws.called("CreateJob"))
        assert "ModelPackageConfig" not in base_doc  # the base model itself, no trained package
        assert base_doc["EvaluationConfig"]["BaseModelArn"] == after_doc["EvaluationConfig"]["BaseModelArn"]
        assert after_doc["ModelPackageConfig"] == {"InputModelPackageArn": PACKAGE_ARN}
        # The same held-out channel and scoring for both; separate output folders.
        assert base_doc["InputDataConfig"] == after_doc["InputDataConfig"]
        # Inside the job role's write grant (runs/*/evaluation/*), apart from the after-training output.
        assert base_doc["OutputDataConfig"]["S3OutputPath"] == f"s3://{BUCKET}/runs/{run_id}/evaluation/baseline/"
        assert after_doc["OutputDataConfig"]["S3OutputPath"] == f"s3://{BUCKET}/runs/{run_id}/evaluation/"
        # Waited for in its own bounded loop, before Submit.
        entered = pipeline.entered_states(pipeline.executions()[0]["executionArn"])
        assert entered.index("Baseline") < entered.index("Submit")
        assert entered.count("WaitForBaseline") == 4  # after the submit, then once per InProgress poll
        assert record["phases"]["baseline"]["ended_at"] <= record["phases"]["submit"]["started_at"]
        assert record["baseline"] == {"eval/reward/pass_at_1": 0.125, "eval/reward/mean": 0.0625}
        summary = pipeline.object_json(f"runs/{run_id}/summary.json")
        assert summary["baseline"]["metrics"]["eval/reward/pass_at_1"] == {"baseline": 0.125, "after_training": 0.5}
        assert summary["baseline"]["measure"] == "evaluation"  # wordle's EVALUATION is what the agent reports
        assert "before the training job" in summary["baseline"]["how"]
        (note,) = pipeline.notifications()
        assert (
            "Baseline before training → after training (evaluation): eval/reward/mean 0.0625 → 0.25"
            in (note["message"])
        )
        world.assert_calls_are_the_documented_ones()


def test_a_failed_baseline_evaluation_fails_the_run_before_any_training() -> None:
    world = ServerlessWorld(eval_states=[("InProgress", "Evaluating"), ("Failed", "Failed")])
    with _pipeline(world) as pipeline:
        pipeline.put("eval-data/held-out.jsonl", jsonl(wordle_rows(4, start=100)))
        manifest = {"eval_dataset": "eval-data/held-out.jsonl", "baseline_evaluation": True}
        run_id, execution = _run(pipeline, "sl-basefail", DATA, manifest)
        assert execution["status"] == "FAILED"
        record = _assert_finished(pipeline, run_id, "FAILED")
        assert record["error"]["step"] == "Baseline"
        assert "baseline evaluation" in record["error"]["cause"]
        assert world.created("AgentRFT") == []  # nothing was spent on training
        assert record["phases"]["baseline"]["outcome"] == "failed"


def test_evaluation_failure_fails_the_run_at_evaluate() -> None:
    world = ServerlessWorld(
        eval_states=[("InProgress", "Evaluating"), ("InProgress", "Evaluating"), ("Failed", "Failed")]
    )
    with _pipeline(world) as pipeline:
        pipeline.put("eval-data/held-out.jsonl", jsonl(wordle_rows(4, start=100)))
        run_id, execution = _run(pipeline, "sl-evalfail", DATA, {"eval_dataset": "eval-data/held-out.jsonl"})
        assert execution["status"] == "FAILED"
        record = _assert_finished(pipeline, run_id, "FAILED")
        assert record["error"]["step"] == "Evaluate"
        assert "the agent signaled that the trajectory failed" in record["error"]["cause"]
        assert record["phases"]["evaluate"]["outcome"] == "failed"
        assert all(job["stopped"] or job["polls"] for job in world.jobs.values())


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        ("cross_account", "answered 403 to the agent: the job ARN's account"),
        ("timeout", "did not answer within 30 s: its HTTP server never started"),
    ],
)
def test_lambda_agent_smoke_test_findings_stop_the_run_before_create_job(answer: Answer, words: str) -> None:
    world = ServerlessWorld(answer=answer)
    with _pipeline(world) as pipeline:
        run_id, execution = _run(pipeline, f"sl-{answer.replace('_', '')}", DATA)
        assert execution["error"] == "PreflightFailed"
        assert "agent-smoke-test" in execution["cause"]
        assert words in execution["cause"]
        record = _assert_finished(pipeline, run_id, "FAILED")
        assert record["error"]["step"] == "Preflight"
        assert world.aws.called("CreateJob") == []
        (note,) = pipeline.notifications()
        assert "at Preflight" in note["subject"]


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        ("wired", None),
        ("cross_account", "answered 403 to the agent"),
        ("timeout", "did not answer within 30 s: its HTTP server never started (an AgentCore agent needs"),
    ],
)
def test_an_existing_agentcore_runtime_from_the_manifest_works_end_to_end(answer: Answer, words: str | None) -> None:
    world = ServerlessWorld(answer=answer)
    with _pipeline(world) as pipeline:
        run_id, execution = _run(
            pipeline, f"sl-ac-{answer.replace('_', '')}", DATA, {"backend_options": {"agent_runtime_arn": RUNTIME_ARN}}
        )
        assert world.invoked == [(RUNTIME_ARN, "agentcore")]
        assert world.aws.called("Invoke") == []  # the environment's Lambda is not used
        if words is None:
            assert execution["status"] == "SUCCEEDED", execution
            (create,) = world.created("AgentRFT")
            agent = json.loads(create["JobConfigDocument"])["AgentConfig"]
            assert agent == {"BedrockAgentCoreConfig": {"AgentRuntimeArn": RUNTIME_ARN, "Qualifier": "DEFAULT"}}
            findings = pipeline.record(run_id)["phases"]["preflight"]["findings"]
            (smoke,) = [f for f in findings if f["check"] == "agent-smoke-test"]
            assert "400 'Could not find job'" in smoke["message"]
            assert "wired correctly" in smoke["message"]
        else:
            assert execution["error"] == "PreflightFailed"
            assert words in execution["cause"]
            assert world.aws.called("CreateJob") == []
        world.assert_calls_are_the_documented_ones()


def test_the_deployments_agentcore_runtime_setting_serves_environments_without_a_lambda() -> None:
    world = ServerlessWorld(environments=("wordle",), extra_settings={"serverless_agent_runtime_arn": RUNTIME_ARN})
    with _pipeline(world) as pipeline:
        _, execution = _run(pipeline, "sl-ac-setting", ASK_TO_CODE, {"environment": "ask_to_code"})
        assert execution["status"] == "SUCCEEDED", execution
        assert world.invoked == [(RUNTIME_ARN, "agentcore")]


def test_a_run_of_each_environment_reaches_its_own_agent() -> None:
    world = ServerlessWorld()
    with _pipeline(world) as pipeline:
        played = {}
        for env_id, data in (("wordle", DATA), ("ask_to_code", ASK_TO_CODE)):
            run_id, execution = _run(pipeline, f"sl-env-{env_id.replace('_', '')}", data, {"environment": env_id})
            assert execution["status"] == "SUCCEEDED", execution
            played[env_id] = world.invoked[-1]
            create = world.created("AgentRFT")[-1]
            agent = json.loads(create["JobConfigDocument"])["AgentConfig"]["CustomAgentLambdaConfig"]["LambdaArn"]
            assert agent == agent_arn(env_id), run_id
        # The smoke test ran the real agent handler of each environment (it parsed that environment's task).
        assert played == {env: (agent_arn(env), env) for env in ("wordle", "ask_to_code")}
        samples = world.runtime.called("Sample")
        assert len(samples) == 2
        world.assert_calls_are_the_documented_ones()


def test_an_environment_without_an_agent_is_refused_at_preflight() -> None:
    world = ServerlessWorld(environments=("wordle",))
    with _pipeline(world) as pipeline:
        run_id, execution = _run(pipeline, "sl-noagent", ASK_TO_CODE, {"environment": "ask_to_code"})
        assert execution["error"] == "PreflightFailed"
        assert (
            "environment 'ask_to_code' has no serverless agent (agent Lambdas are deployed for: wordle)"
            in (execution["cause"])
        )
        assert world.invoked == []
        assert world.aws.called("CreateJob") == []
        _assert_finished(pipeline, run_id, "FAILED")


def test_a_model_the_region_does_not_offer_and_a_bucket_elsewhere_are_refused() -> None:
    # The base model is deploy-time (its EULA is accepted for that model), so a deployment names it.
    world = ServerlessWorld(extra_settings={"serverless_base_model": "llama-9"})
    with _pipeline(world) as pipeline:
        _, execution = _run(pipeline, "sl-model", DATA)
        assert execution["error"] == "PreflightFailed"
        assert "base model 'llama-9' is not one serverless MTRL offers" in execution["cause"]
    world = ServerlessWorld(extra_settings={"region": "us-west-2"})
    with _pipeline(world) as pipeline:
        _, execution = _run(pipeline, "sl-bucket", DATA)
        assert execution["error"] == "PreflightFailed"
        assert f"bucket {BUCKET} in us-east-1" in execution["cause"]
        assert world.invoked == []


def test_unknown_or_out_of_range_serverless_options_are_refused_at_register() -> None:
    world = ServerlessWorld()
    with _pipeline(world) as pipeline:
        manifest = {
            "hyperparameters": {"group_size": 64, "kl_coef": 0.1},
            "backend_options": {"serverless_job_role_arn": f"arn:aws:iam::{ACCOUNT}:role/admin"},
        }
        run_id, execution = _run(pipeline, "sl-badopts", DATA, manifest)
        assert execution["error"] == "ConfigurationError"
        cause = execution["cause"]
        assert "'group_size' must be in [2, 32] (got 64)" in cause
        assert "'kl_coef' is not a documented serverless MTRL hyperparameter" in cause
        assert "'backend_options.serverless_job_role_arn': not a per-run option of backend 'serverless'" in cause
        assert pipeline.record(run_id)["error"]["step"] == "Register"
        assert world.aws.calls == [] or world.aws.called("CreateJob") == []


def test_serverless_run_timeout_stops_the_job() -> None:
    world = ServerlessWorld(job_states=[("InProgress", "Training")])
    with _pipeline(world) as pipeline:
        started = pipeline.upload_and_trigger("training-data/sl-slow.jsonl", DATA)
        deadline = time.time() + 60
        while not world.aws.called("DescribeJob") and time.time() < deadline:
            time.sleep(0.05)
        pipeline.shift_clock(3600)
        execution = pipeline.wait(started["execution_arn"], timeout=120)
        assert execution["error"] == "RunTimedOut"
        _assert_finished(pipeline, started["run_id"], "TIMED_OUT")
        assert len(world.aws.called("StopJob")) == 1
        assert all(job["stopped"] for job in world.jobs.values())


def _converted_ids(pipeline: Harness, key: str) -> list[str]:
    body = pipeline.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    return [json.loads(json.loads(line)["prompt"])["id"] for line in body.splitlines()]


def test_an_eval_split_run_trains_without_its_held_out_rows_and_evaluates_on_them() -> None:
    # eval_split is materialised by Validate (runs/<id>/data/); before, the job trained on every row and the
    # Evaluate phase failed with "evaluation needs an eval split".
    world = ServerlessWorld(eval_states=[("InProgress", "Evaluating"), ("Completed", "Completed")])
    rows = wordle_rows(20)
    held_out = sorted(row["id"] for row in rows if eval_split_of(row["id"], 0.25))
    assert 0 < len(held_out) < len(rows)
    with _pipeline(world) as pipeline:
        run_id, execution = _run(pipeline, "sl-split", jsonl(rows), {"eval_split": 0.25})
        assert execution["status"] == "SUCCEEDED", execution
        record = _assert_finished(pipeline, run_id, "SUCCEEDED")
        train_ids = _converted_ids(pipeline, f"runs/{run_id}/input/train/data.jsonl")
        assert not set(train_ids) & set(held_out)  # no held-out row in the training channel
        assert sorted(train_ids + held_out) == sorted(row["id"] for row in rows)
        for channel in ("validation", "evaluation"):
            assert sorted(_converted_ids(pipeline, f"runs/{run_id}/input/{channel}/data.jsonl")) == held_out
        (create,) = world.created("AgentRFT")
        channels = json.loads(create["JobConfigDocument"])["InputDataConfig"]
        assert {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in channels} == {
            "train": f"s3://{BUCKET}/runs/{run_id}/input/train/",
            "validation": f"s3://{BUCKET}/runs/{run_id}/input/validation/",
        }
        (evaluation,) = world.created("AgentRFTEvaluation")
        assert f"s3://{BUCKET}/runs/{run_id}/input/evaluation/" in evaluation["JobConfigDocument"]
        splits = record["validation"]["splits"]
        assert splits["train_uri"] == f"s3://{BUCKET}/runs/{run_id}/data/train.jsonl"
        assert splits["eval_uri"] == f"s3://{BUCKET}/runs/{run_id}/data/eval.jsonl"
        assert (splits["train_rows"], splits["eval_rows"]) == (len(rows) - len(held_out), len(held_out))
        assert pipeline.object_json(f"runs/{run_id}/validation.json")["splits"] == splits
        summary = pipeline.object_json(f"runs/{run_id}/summary.json")
        assert summary["dataset_splits"] == splits
        assert summary["evaluation"] == {"eval/reward/pass_at_1": 0.5, "eval/reward/mean": 0.25}
        world.assert_calls_are_the_documented_ones()
