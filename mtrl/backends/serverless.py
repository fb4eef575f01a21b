"""The ``serverless`` backend: SageMaker AI serverless multi-turn RL (``CreateJob``, ``JobCategory=AgentRFT``).

The service trains; an agent (a Lambda built from the environment package, or an existing Bedrock AgentCore
runtime) plays the episodes and reports rewards through the ``sagemakerjobruntime`` API. The only per-run
resource is the job itself. The installed botocore (≥ 1.43.37) models ``CreateJob``/``DescribeJob``/``StopJob``
and ``sagemakerjobruntime``; no model extension is needed.

Run settings read here (flat keys; the pipeline passes the run's effective settings):

- ``region``; ``serverless_job_role_arn`` (trusts ``job.sagemaker.amazonaws.com`` with AssumeRole + TagSession)
- exactly one of ``serverless_agent_lambda_arn`` / ``serverless_agent_runtime_arn`` (+ ``serverless_agent_qualifier``)
- ``serverless_base_model`` (hub model id), optional ``serverless_base_model_arn``; ``serverless_accept_eula``
- ``serverless_mlflow_app_arn`` (mandatory for the service), optional ``serverless_mlflow_experiment``
- ``serverless_model_package_group_arn``, optional ``serverless_checkpoint_model_package_group_arn``
- optional ``kms_key_arn``, ``serverless_subnet_ids`` + ``serverless_security_group_ids``
- ``hyperparameters``: only what the user set; the service applies the model's defaults to the rest
- ``serverless_evaluate``, ``eval_pass_k``, ``eval_group_size``, ``eval_hyperparameters``, ``eval_max_runtime_seconds``
- ``serverless_smoke_test_timeout_seconds`` (30)
"""

from __future__ import annotations

import base64
import json
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal
from urllib.parse import unquote

from botocore.exceptions import ClientError, ReadTimeoutError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from mtrl.backends._aws import (
    Arn,
    AwsClients,
    S3Uri,
    backend_error,
    error_code,
    error_message,
    iter_s3_lines,
    safe_name,
    short_token,
)
from mtrl.backends.base import BackendError, CreatedResource, Finding, JobState, JobStatus, RunContext
from mtrl.cost import CostError, cost_for_run

SCHEMA_VERSION = "1.0.0"
TRAINING_CATEGORY = "AgentRFT"
EVALUATION_CATEGORY = "AgentRFTEvaluation"
JOB_KIND = "sagemaker-job"
DEFAULT_BASE_MODEL = "openai-reasoning-gpt-oss-20b"
JOB_TRUST_PRINCIPAL = "job.sagemaker.amazonaws.com"

HyperValue = str | int | float | bool

# Limits the service enforces (reference C.2); checked here so a bad value fails before any spend.
_HYPERPARAMETER_RULES: dict[str, Callable[[float], bool]] = {
    "sampling_max_tokens": lambda v: 1 <= v <= 8192,
    "rollout_max_concurrency": lambda v: 32 <= v <= 96,
    "global_batch_size": lambda v: v in {32, 64, 128},
    "group_size": lambda v: v >= 2,
    "learning_rate": lambda v: 0 < v < 1,
    "max_steps": lambda v: v >= 1,
    "max_epochs": lambda v: v >= 1,
    "rollout_timeout": lambda v: v > 0,
    "rollout_max_retries": lambda v: v >= 0,
    "lora_rank": lambda v: v >= 1,
    "lora_alpha": lambda v: v >= 1,
    "temperature": lambda v: v >= 0,
    "sampling_top_p": lambda v: 0 < v <= 1,
    "val_every": lambda v: v >= 1,
    "clip_low_threshold": lambda v: v > 0,
    "clip_high_threshold": lambda v: v > 0,
    "adam_beta1": lambda v: 0 < v < 1,
    "adam_beta2": lambda v: 0 < v < 1,
    "max_steps_off_policy": lambda v: v >= 0,
}
_STRING_HYPERPARAMETERS = {"advantage_method", "loss_fn"}


class ServerlessSettings(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    region: str = Field(min_length=1)
    serverless_job_role_arn: str
    serverless_agent_lambda_arn: str | None = None
    serverless_agent_runtime_arn: str | None = None
    serverless_agent_qualifier: str = "DEFAULT"
    serverless_base_model: str = DEFAULT_BASE_MODEL
    serverless_base_model_arn: str | None = None
    serverless_accept_eula: bool = False
    serverless_mlflow_app_arn: str
    serverless_mlflow_experiment: str = "mtrl"
    serverless_model_package_group_arn: str
    serverless_checkpoint_model_package_group_arn: str | None = None
    kms_key_arn: str | None = None
    serverless_subnet_ids: list[str] = []
    serverless_security_group_ids: list[str] = []
    hyperparameters: dict[str, HyperValue] = {}
    serverless_evaluate: bool = False
    eval_pass_k: list[int] = [1]
    eval_group_size: int = Field(1, ge=1)
    eval_hyperparameters: dict[str, HyperValue] = {}
    eval_max_runtime_seconds: int = Field(4 * 3600, ge=60)
    serverless_smoke_test_timeout_seconds: int = Field(30, ge=5, le=300)

    @field_validator(
        "serverless_job_role_arn",
        "serverless_agent_lambda_arn",
        "serverless_agent_runtime_arn",
        "serverless_base_model_arn",
        "serverless_mlflow_app_arn",
        "serverless_model_package_group_arn",
        "serverless_checkpoint_model_package_group_arn",
        "kms_key_arn",
    )
    @classmethod
    def _arn(cls, value: str | None) -> str | None:
        if value is not None:
            Arn.parse(value)
        return value

    @model_validator(mode="after")
    def _checks(self) -> ServerlessSettings:
        if (self.serverless_agent_lambda_arn is None) == (self.serverless_agent_runtime_arn is None):
            raise ValueError("set exactly one of serverless_agent_lambda_arn or serverless_agent_runtime_arn")
        if bool(self.serverless_subnet_ids) != bool(self.serverless_security_group_ids):
            raise ValueError("serverless_subnet_ids and serverless_security_group_ids go together")
        for name, value in self.hyperparameters.items():
            _check_hyperparameter(name, value)
        bad_k = [k for k in self.eval_pass_k if k < 1 or k > self.eval_group_size]
        if bad_k:
            raise ValueError(
                f"eval_pass_k values {bad_k} must be between 1 and eval_group_size ({self.eval_group_size})"
            )
        return self

    @property
    def agent_arn(self) -> str:
        return self.serverless_agent_lambda_arn or self.serverless_agent_runtime_arn or ""

    @property
    def base_model_arn(self) -> str:
        if self.serverless_base_model_arn:
            return self.serverless_base_model_arn
        partition = Arn.parse(self.serverless_job_role_arn).partition
        hub = "hub-content/SageMakerPublicHub/Model"
        return f"arn:{partition}:sagemaker:{self.region}:aws:{hub}/{self.serverless_base_model}"

    @property
    def unknown_hyperparameters(self) -> list[str]:
        known = set(_HYPERPARAMETER_RULES) | _STRING_HYPERPARAMETERS
        return sorted(set(self.hyperparameters) - known)


def _check_hyperparameter(name: str, value: HyperValue) -> None:
    rule = _HYPERPARAMETER_RULES.get(name)
    if rule is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"hyperparameter {name} must be a number, got {value!r}")
    if not rule(float(value)):
        raise ValueError(f"hyperparameter {name}={value} is outside what the service accepts")


def parse_settings(settings: Mapping[str, Any]) -> ServerlessSettings:
    try:
        return ServerlessSettings.model_validate(dict(settings))
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in error.errors())
        raise BackendError(f"serverless settings are invalid: {problems}") from error


# ---------------------------------------------------------------------------------------------------------------
# Dataset conversion and JobConfigDocument


def to_service_row(row: Mapping[str, Any]) -> dict[str, str]:
    """One dataset row as the service wants it: ``{"prompt": "<JSON string>"}``, passed to the agent verbatim.

    Rows already in that form pass through; Nova-style rows ``{"id", "metadata": {...}}`` are flattened to
    ``{"id", "prompt", "answer", ...}``; any other object is sent whole.
    """
    if set(row) == {"prompt"} and isinstance(row["prompt"], str):
        return {"prompt": row["prompt"]}
    if isinstance(row.get("metadata"), Mapping) and "id" in row:
        task: dict[str, Any] = {"id": row["id"], **row["metadata"]}
    else:
        task = dict(row)
    return {"prompt": json.dumps(task, ensure_ascii=False, sort_keys=True)}


def convert_dataset(s3: Any, source: S3Uri, destination: S3Uri) -> int:
    """Stream ``source`` (JSONL) into ``destination`` in the service's row format; returns the row count."""
    rows = 0
    with tempfile.SpooledTemporaryFile(max_size=32 * 1024 * 1024) as buffer:
        for number, raw in enumerate(iter_s3_lines(s3, source), start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except json.JSONDecodeError as error:
                raise BackendError(f"{source} line {number} is not JSON: {error}") from error
            if not isinstance(row, dict):
                raise BackendError(f"{source} line {number} is not a JSON object")
            buffer.write(json.dumps(to_service_row(row), ensure_ascii=False).encode() + b"\n")
            rows += 1
        if rows == 0:
            raise BackendError(f"{source} has no rows")
        buffer.seek(0)
        s3.upload_fileobj(buffer, destination.bucket, destination.key)
    return rows


def _hyperparameter_strings(values: Mapping[str, HyperValue]) -> dict[str, str]:
    """The service takes flat string values (the nested form is rejected by its schema validation)."""

    def text(value: HyperValue) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    return {name: text(value) for name, value in sorted(values.items())}


def _agent_config(settings: ServerlessSettings) -> dict[str, Any]:
    if settings.serverless_agent_runtime_arn:
        return {
            "BedrockAgentCoreConfig": {
                "AgentRuntimeArn": settings.serverless_agent_runtime_arn,
                "Qualifier": settings.serverless_agent_qualifier,
            }
        }
    return {"CustomAgentLambdaConfig": {"LambdaArn": settings.serverless_agent_lambda_arn}}


def _channel(name: str, uri: S3Uri) -> dict[str, Any]:
    return {"ChannelName": name, "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": str(uri)}}}


def _vpc(settings: ServerlessSettings) -> dict[str, Any]:
    if not settings.serverless_subnet_ids:
        return {}
    return {
        "VpcConfig": {
            "SecurityGroupIds": list(settings.serverless_security_group_ids),
            "Subnets": list(settings.serverless_subnet_ids),
        }
    }


def build_training_config(
    settings: ServerlessSettings, *, job_name: str, train: S3Uri, validation: S3Uri | None, output: S3Uri
) -> dict[str, Any]:
    output_config: dict[str, Any] = {"S3OutputPath": str(output)}
    if settings.kms_key_arn:
        output_config["KmsKeyArn"] = settings.kms_key_arn
    packages: dict[str, Any] = {"OutputModelPackageGroupArn": settings.serverless_model_package_group_arn}
    if settings.serverless_checkpoint_model_package_group_arn:
        packages["IntermediateCheckpointModelPackageGroupArn"] = settings.serverless_checkpoint_model_package_group_arn
    training: dict[str, Any] = {
        "BaseModelArn": settings.base_model_arn,
        "MlflowConfig": {
            "MlflowResourceArn": settings.serverless_mlflow_app_arn,
            "MlflowExperimentName": settings.serverless_mlflow_experiment,
            "MlflowRunName": job_name,
        },
        "AcceptEula": settings.serverless_accept_eula,
    }
    if settings.hyperparameters:
        training["HyperParameters"] = _hyperparameter_strings(settings.hyperparameters)
    channels = [_channel("train", train)] + ([_channel("validation", validation)] if validation else [])
    return {
        "AgentConfig": _agent_config(settings),
        "InputDataConfig": channels,
        "OutputDataConfig": output_config,
        "ModelPackageConfig": packages,
        "TrainingConfig": training,
        **_vpc(settings),
    }


def build_evaluation_config(
    settings: ServerlessSettings,
    *,
    job_name: str,
    evaluation: S3Uri,
    output: S3Uri,
    model_package_arn: str | None,
) -> dict[str, Any]:
    hyper: dict[str, HyperValue] = {
        "eval_group_size": settings.eval_group_size,
        **settings.eval_hyperparameters,
    }
    strings = _hyperparameter_strings(hyper)
    strings["pass_k_values"] = json.dumps(sorted(set(settings.eval_pass_k)))
    output_config: dict[str, Any] = {
        "S3OutputPath": str(output),
        "MlflowConfig": {
            "MlflowResourceArn": settings.serverless_mlflow_app_arn,
            "MlflowExperimentName": f"{settings.serverless_mlflow_experiment}-eval",
            "MlflowRunName": job_name,
        },
    }
    if settings.kms_key_arn:
        output_config["KmsKeyArn"] = settings.kms_key_arn
    document: dict[str, Any] = {
        "AgentConfig": _agent_config(settings),
        "InputDataConfig": [_channel("evaluation", evaluation)],
        "OutputDataConfig": output_config,
        "EvaluationConfig": {
            "BaseModelArn": settings.base_model_arn,
            "AcceptEula": settings.serverless_accept_eula,
            "HyperParameters": strings,
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": settings.eval_max_runtime_seconds},
        **_vpc(settings),
    }
    if model_package_arn:
        document["ModelPackageConfig"] = {"InputModelPackageArn": model_package_arn}
    return document


def job_name_for(run_id: str, *, evaluation: bool = False) -> str:
    return safe_name(run_id, max_length=63, prefix="mtrl-eval-" if evaluation else "mtrl-")


def run_input_prefix(run: RunContext) -> S3Uri:
    """Converted data lives with the run's artifacts, never under the trigger prefix ``training-data/``."""
    return S3Uri.parse(run.output_uri).join("input")


# ---------------------------------------------------------------------------------------------------------------
# Smoke test


SmokeOutcome = Literal["ok", "cross_account", "timeout", "other"]

# The service's words, and the diagnosis our agent Lambda (lambda/serverless_agent) returns for each case.
_NOT_FOUND = re.compile(r"could not find job|job not found|ResourceNotFoundException", re.IGNORECASE)
_FORBIDDEN = re.compile(r"\b403\b|not authorized to access this resource|access ?denied|Forbidden", re.IGNORECASE)
_TIMEOUT = re.compile(r"timed? ?out|timeout", re.IGNORECASE)


@dataclass(frozen=True)
class SmokeResult:
    outcome: SmokeOutcome
    message: str
    evidence: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


def classify_smoke(evidence: str, *, timed_out: bool, job_arn: str, timeout_seconds: int) -> SmokeResult:
    """What an agent invocation with a fake job ARN tells us about its wiring (reference A.7)."""
    account = job_arn.split(":")[4] if job_arn.count(":") >= 5 else "?"
    if _NOT_FOUND.search(evidence):
        return SmokeResult("ok", "agent reached the job runtime, which answered 400 'Could not find job': wiring OK")
    if _FORBIDDEN.search(evidence):
        return SmokeResult(
            "cross_account",
            f"the job runtime answered 403 to the agent: the job ARN's account ({account}) is not the account the "
            "agent runs in, or the agent role lacks AmazonSageMakerJobRuntimeAccess",
            evidence,
        )
    if timed_out or _TIMEOUT.search(evidence):
        return SmokeResult(
            "timeout",
            f"the agent did not answer within {timeout_seconds} s: its HTTP server never started (an AgentCore agent "
            "needs BedrockAgentCoreApp serving :8080; the RFT decorator alone starts no server)",
            evidence,
        )
    return SmokeResult("other", f"unexpected agent response: {evidence.strip() or '(empty)'}", evidence)


def smoke_payload(prompt: str, job_arn: str, region: str, rollout_id: str) -> dict[str, Any]:
    return {
        "prompt": prompt,
        "metadata": {"jobArn": job_arn, "rolloutId": rollout_id, "region": region},
        "inferenceParams": {"maxTokens": 64},
    }


# ---------------------------------------------------------------------------------------------------------------
# The adapter


class ServerlessAdapter:
    name = "serverless"

    def __init__(
        self,
        clients: AwsClients | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        log_wait_attempts: int = 3,
    ) -> None:
        self._clients = clients or AwsClients()
        self._sleep = sleep
        self._log_wait_attempts = log_wait_attempts

    # -- preflight ----------------------------------------------------------------------------------------------

    def preflight(self, run: RunContext) -> list[Finding]:
        try:
            settings = parse_settings(run.settings)
        except BackendError as error:
            return [Finding("settings", False, str(error))]
        findings = [Finding("settings", True, "serverless settings are complete")]
        findings.append(self._check_regions(run, settings))
        findings.append(self._check_role_trust(settings))
        findings.append(self._check_mlflow_and_packages(settings))
        findings.append(
            Finding("eula", True, f"EULA of {settings.serverless_base_model} accepted")
            if settings.serverless_accept_eula
            else Finding(
                "eula", False, f"set serverless_accept_eula=true to accept the EULA of {settings.serverless_base_model}"
            )
        )
        unknown = settings.unknown_hyperparameters
        findings.append(
            Finding(
                "hyperparameters",
                True,
                f"not checked by mtrl, passed as given: {', '.join(unknown)}"
                if unknown
                else "hyperparameters in range",
            )
        )
        if all(finding.ok for finding in findings):
            # Only worth invoking the agent once everything it depends on is right.
            result = self.smoke_test(run, settings)
            findings.append(Finding("agent-smoke-test", result.ok, result.message))
        return findings

    def _check_regions(self, run: RunContext, settings: ServerlessSettings) -> Finding:
        region = settings.region
        elsewhere: list[str] = []
        for label, arn in (
            ("agent", settings.agent_arn),
            ("MLflow app", settings.serverless_mlflow_app_arn),
            ("model package group", settings.serverless_model_package_group_arn),
            ("KMS key", settings.kms_key_arn),
        ):
            if arn and Arn.parse(arn).region not in {region, ""}:
                elsewhere.append(f"{label} in {Arn.parse(arn).region}")
        s3 = self._clients.client("s3", region)
        buckets = {S3Uri.parse(run.output_uri).bucket, S3Uri.parse(run.dataset_uri).bucket}
        for bucket in sorted(buckets):
            try:
                location = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint") or "us-east-1"
            except ClientError as error:
                return Finding("region", False, f"cannot read the region of bucket {bucket}: {error_message(error)}")
            location = "eu-west-1" if location == "EU" else location
            if location != region:
                elsewhere.append(f"bucket {bucket} in {location}")
        if elsewhere:
            return Finding(
                "region", False, f"job, agent and bucket must share region {region}; found {'; '.join(elsewhere)}"
            )
        return Finding("region", True, f"job, agent, MLflow app and buckets are all in {region}")

    def _check_role_trust(self, settings: ServerlessSettings) -> Finding:
        role_name = Arn.parse(settings.serverless_job_role_arn).resource.split("/")[-1]
        iam = self._clients.client("iam", settings.region)
        try:
            document = iam.get_role(RoleName=role_name)["Role"]["AssumeRolePolicyDocument"]
        except ClientError as error:
            return Finding("job-role-trust", False, f"cannot read job role {role_name}: {error_message(error)}")
        return check_job_role_trust(role_name, document)

    def _check_mlflow_and_packages(self, settings: ServerlessSettings) -> Finding:
        """The MLflow app is mandatory for the service, and the output model package group must exist."""
        sagemaker = self._clients.client("sagemaker", settings.region)
        try:
            app = sagemaker.describe_mlflow_app(Arn=settings.serverless_mlflow_app_arn)
        except ClientError as error:
            return Finding("mlflow-and-model-packages", False, f"MLflow app: {error_message(error)}")
        if app.get("Status") not in {"Created", "Updated"}:
            return Finding("mlflow-and-model-packages", False, f"MLflow app is {app.get('Status')}, not ready")
        try:
            # By name (the API takes either); the ARN's region was checked above.
            name = Arn.parse(settings.serverless_model_package_group_arn).resource.split("/", 1)[-1]
            group = sagemaker.describe_model_package_group(ModelPackageGroupName=name)
        except ClientError as error:
            return Finding("mlflow-and-model-packages", False, f"model package group: {error_message(error)}")
        if group["ModelPackageGroupStatus"] != "Completed":
            return Finding(
                "mlflow-and-model-packages", False, f"model package group is {group['ModelPackageGroupStatus']}"
            )
        return Finding("mlflow-and-model-packages", True, "MLflow app ready; model package group exists")

    def smoke_test(self, run: RunContext, settings: ServerlessSettings | None = None) -> SmokeResult:
        """Invoke the agent with a fake job ARN of this account and classify what happened."""
        settings = settings or parse_settings(run.settings)
        sts = self._clients.client("sts", settings.region)
        account = sts.get_caller_identity()["Account"]
        partition = Arn.parse(settings.serverless_job_role_arn).partition
        token = short_token(f"{run.run_id}-{time.time()}", 12)
        job_arn = f"arn:{partition}:sagemaker:{settings.region}:{account}:job/{TRAINING_CATEGORY}/mtrl-smoke-{token}"
        payload = smoke_payload(self._first_prompt(run), job_arn, settings.region, f"mtrl-smoke-{token}")
        timeout = settings.serverless_smoke_test_timeout_seconds
        if settings.serverless_agent_lambda_arn:
            evidence, timed_out = self._invoke_lambda(settings, payload, timeout)
        else:
            evidence, timed_out = self._invoke_agentcore(settings, payload, timeout, token)
        return classify_smoke(evidence, timed_out=timed_out, job_arn=job_arn, timeout_seconds=timeout)

    def _first_prompt(self, run: RunContext) -> str:
        s3 = self._clients.client("s3", str(run.settings.get("region", "")))
        for raw in iter_s3_lines(s3, S3Uri.parse(run.dataset_uri)):
            if raw.strip():
                row = json.loads(raw)
                return to_service_row(row)["prompt"] if isinstance(row, dict) else raw.decode()
        raise BackendError(f"{run.dataset_uri} has no rows to smoke-test the agent with")

    def _invoke_lambda(self, settings: ServerlessSettings, payload: dict[str, Any], timeout: int) -> tuple[str, bool]:
        client = self._clients.client("lambda", settings.region, read_timeout=timeout)
        try:
            response = client.invoke(
                FunctionName=settings.serverless_agent_lambda_arn,
                InvocationType="RequestResponse",
                LogType="Tail",
                Payload=json.dumps(payload).encode(),
            )
        except ReadTimeoutError as error:
            return str(error), True
        except ClientError as error:
            return f"{error_code(error)}: {error_message(error)}", False
        parts = [response["Payload"].read().decode(errors="replace")]
        if response.get("FunctionError"):
            parts.append(f"FunctionError: {response['FunctionError']}")
        if response.get("LogResult"):
            parts.append(base64.b64decode(response["LogResult"]).decode(errors="replace"))
        return "\n".join(parts), False

    def _invoke_agentcore(
        self, settings: ServerlessSettings, payload: dict[str, Any], timeout: int, token: str
    ) -> tuple[str, bool]:
        client = self._clients.client("bedrock-agentcore", settings.region, read_timeout=timeout)
        started_ms = int(time.time() * 1000)
        try:
            response = client.invoke_agent_runtime(
                agentRuntimeArn=settings.serverless_agent_runtime_arn,
                qualifier=settings.serverless_agent_qualifier,
                runtimeSessionId=f"mtrl-smoke-session-{token}-{started_ms}".ljust(33, "0"),
                contentType="application/json",
                accept="application/json",
                payload=json.dumps(payload).encode(),
            )
            body = response["response"].read().decode(errors="replace")
            timed_out = False
        except ReadTimeoutError as error:
            body, timed_out = str(error), True
        except ClientError as error:
            body, timed_out = f"{error_code(error)}: {error_message(error)}", False
        if timed_out or _NOT_FOUND.search(body):
            return body, timed_out
        # The runtime's answer to the agent is usually only in the agent's logs (the agent returns a low reward).
        return "\n".join([body, *self._agentcore_logs(settings, started_ms)]), False

    def _agentcore_logs(self, settings: ServerlessSettings, since_ms: int) -> list[str]:
        runtime_id = Arn.parse(settings.agent_arn).resource.split("/")[-1]
        group = f"/aws/bedrock-agentcore/runtimes/{runtime_id}-{settings.serverless_agent_qualifier}"
        logs = self._clients.client("logs", settings.region)
        for attempt in range(self._log_wait_attempts):
            try:
                events = logs.filter_log_events(logGroupName=group, startTime=since_ms, limit=200).get("events", [])
            except ClientError as error:
                return [f"(agent logs unavailable in {group}: {error_message(error)})"]
            messages = [str(event.get("message", "")) for event in events]
            if any(_NOT_FOUND.search(m) or _FORBIDDEN.search(m) for m in messages):
                return messages
            if attempt + 1 < self._log_wait_attempts:
                self._sleep(5)  # log delivery lags the invocation by a few seconds
        return messages

    # -- provision / submit ------------------------------------------------------------------------------------

    def provision(self, run: RunContext) -> list[CreatedResource]:
        """Convert the dataset(s) into the service format under ``runs/<run-id>/input/``; no AWS resources."""
        settings = parse_settings(run.settings)
        s3 = self._clients.client("s3", settings.region)
        prefix = run_input_prefix(run)
        try:
            convert_dataset(s3, S3Uri.parse(run.dataset_uri), prefix.join("train", "data.jsonl"))
            if run.eval_dataset_uri:
                for channel in ("validation", "evaluation"):
                    convert_dataset(s3, S3Uri.parse(run.eval_dataset_uri), prefix.join(channel, "data.jsonl"))
        except ClientError as error:
            raise backend_error(f"run {run.run_id}: converting the dataset", error) from error
        return []

    def submit(self, run: RunContext) -> str:
        settings = parse_settings(run.settings)
        job_name = job_name_for(run.run_id)
        prefix = run_input_prefix(run)
        document = build_training_config(
            settings,
            job_name=job_name,
            train=prefix.join("train/"),
            validation=prefix.join("validation/") if run.eval_dataset_uri else None,
            output=S3Uri.parse(run.output_uri).join("model/"),
        )
        return self._create_job(run, settings, job_name, TRAINING_CATEGORY, document)

    def submit_evaluation(self, run: RunContext, model_package_arn: str | None = None) -> str:
        """Optional held-out evaluation (``AgentRFTEvaluation``, pass@k); the base model when no package is given."""
        settings = parse_settings(run.settings)
        if not run.eval_dataset_uri:
            raise BackendError(f"run {run.run_id}: evaluation needs an eval split")
        job_name = job_name_for(run.run_id, evaluation=True)
        document = build_evaluation_config(
            settings,
            job_name=job_name,
            evaluation=run_input_prefix(run).join("evaluation/"),
            output=S3Uri.parse(run.output_uri).join("evaluation/"),
            model_package_arn=model_package_arn,
        )
        return self._create_job(run, settings, job_name, EVALUATION_CATEGORY, document)

    def evaluate(self, run: RunContext) -> dict[str, float]:
        """Evaluate the trained model on the held-out split (pass@k); polled: raises transient until done.

        The first call submits the ``AgentRFTEvaluation`` job (on the training job's output model package); later
        calls return its metrics once it completes. Only one evaluation job may run per account at a time.
        """
        settings = parse_settings(run.settings)
        eval_job = next(
            (r for r in run.resources if r.kind == JOB_KIND and r.details.get("category") == EVALUATION_CATEGORY), None
        )
        if eval_job is None:
            self.submit_evaluation(run, self._trained_model_package(run, settings))
            raise BackendError(f"run {run.run_id}: evaluation job submitted, waiting for it", transient=True)
        sagemaker = self._clients.client("sagemaker", settings.region)
        try:
            job = sagemaker.describe_job(JobName=eval_job.identifier, JobCategory=EVALUATION_CATEGORY)
        except ClientError as error:
            raise backend_error(f"run {run.run_id}: DescribeJob {eval_job.identifier}", error) from error
        status = job_status_from_description(job)
        if status.state is JobState.SUCCEEDED:
            return dict(status.metrics)
        if status.state.terminal:
            raise BackendError(
                f"run {run.run_id}: evaluation job {eval_job.identifier} ended {status.state}: {status.message}"
            )
        raise BackendError(
            f"run {run.run_id}: evaluation job {eval_job.identifier} is {status.message}", transient=True
        )

    def _trained_model_package(self, run: RunContext, settings: ServerlessSettings) -> str | None:
        training = next(
            (
                r
                for r in run.resources
                if r.kind == JOB_KIND and r.details.get("category", TRAINING_CATEGORY) == TRAINING_CATEGORY
            ),
            None,
        )
        if training is None:
            return None
        job = self._clients.client("sagemaker", settings.region).describe_job(
            JobName=training.identifier, JobCategory=TRAINING_CATEGORY
        )
        return job_status_from_description(job).outputs.get("model_package_arn")

    def _create_job(
        self, run: RunContext, settings: ServerlessSettings, job_name: str, category: str, document: dict[str, Any]
    ) -> str:
        sagemaker = self._clients.client("sagemaker", settings.region)
        run.record_resource(CreatedResource(JOB_KIND, job_name, {"category": category, "region": settings.region}))
        try:
            response = sagemaker.create_job(
                JobName=job_name,
                JobCategory=category,
                RoleArn=settings.serverless_job_role_arn,
                JobConfigSchemaVersion=SCHEMA_VERSION,
                JobConfigDocument=json.dumps(document, sort_keys=True),
                Tags=[{"Key": "mtrl:run-id", "Value": run.run_id[:256]}],
            )
            return str(response["JobArn"])
        except ClientError as error:
            if error_code(error) in {"ResourceInUse", "ConflictException"} or "already exists" in error_message(error):
                # A retried submit after a lost response: the job we created is the answer.
                existing = sagemaker.describe_job(JobName=job_name, JobCategory=category)
                return str(existing["JobArn"])
            raise backend_error(f"run {run.run_id}: CreateJob {job_name}", error) from error

    # -- status / cancel / cleanup -----------------------------------------------------------------------------

    def status(self, run: RunContext, job_id: str) -> JobStatus:
        category, name = _job_from_arn(job_id)
        sagemaker = self._clients.client("sagemaker", str(run.settings.get("region", "")) or Arn.parse(job_id).region)
        try:
            job = sagemaker.describe_job(JobName=name, JobCategory=category)
        except ClientError as error:
            raise backend_error(f"run {run.run_id}: DescribeJob {name}", error) from error
        status = job_status_from_description(job)
        usage = status.progress.get("billable_token_usage")
        if usage:
            status = _with_cost(status, run, usage)
        return status

    def cancel(self, run: RunContext, job_id: str) -> None:
        category, name = _job_from_arn(job_id)
        self._stop(str(run.settings.get("region", "")) or Arn.parse(job_id).region, name, category, run.run_id)

    def _stop(self, region: str, name: str, category: str, run_id: str) -> bool:
        """Stop the job unless it already ended; True once it is stopped/ended (or never existed)."""
        sagemaker = self._clients.client("sagemaker", region)
        try:
            job = sagemaker.describe_job(JobName=name, JobCategory=category)
        except ClientError as error:
            if error_code(error) in {"ResourceNotFound", "ResourceNotFoundException", "ValidationException"}:
                return True  # recorded but never created (CreateJob failed): nothing to stop
            raise backend_error(f"run {run_id}: DescribeJob {name}", error) from error
        if job["JobStatus"] in {"Completed", "Failed", "Stopped", "Deleting", "DeleteFailed"}:
            return True
        if job["JobStatus"] != "Stopping":
            try:
                sagemaker.stop_job(JobName=name, JobCategory=category)
            except ClientError as error:
                raise backend_error(f"run {run_id}: StopJob {name}", error) from error
        return True

    def cleanup(self, run: RunContext) -> list[CreatedResource]:
        """Stop every job this run recorded that is still running. Jobs are kept (their record is the history)."""
        removed: list[CreatedResource] = []
        region_default = str(run.settings.get("region", ""))
        for resource in run.resources:
            if resource.kind != JOB_KIND:
                continue
            region = str(resource.details.get("region") or region_default)
            category = str(resource.details.get("category", TRAINING_CATEGORY))
            if self._stop(region, resource.identifier, category, run.run_id):
                removed.append(resource)
        return removed


def _with_cost(status: JobStatus, run: RunContext, usage: Mapping[str, Any]) -> JobStatus:
    """Add ``cost_usd`` (the pipeline's budget guard reads it) when prices.json knows the model and region."""
    record = {
        "backend": "serverless",
        "region": run.settings.get("region"),
        "model": run.settings.get(
            "serverless_base_model", ServerlessSettings.model_fields["serverless_base_model"].default
        ),
        "billable_token_usage": usage,
    }
    try:
        estimate = cost_for_run(record)
    except CostError:
        return status  # no price for this model/region: report usage, not a made-up cost
    return replace(status, metrics={**status.metrics, "cost_usd": float(estimate.total)})


def check_job_role_trust(role_name: str, document: Any) -> Finding:
    """The job role must trust ``job.sagemaker.amazonaws.com`` with both sts:AssumeRole and sts:TagSession."""
    if isinstance(document, str):
        document = json.loads(unquote(document))
    statements = document.get("Statement", [])
    statements = [statements] if isinstance(statements, dict) else statements
    actions: set[str] = set()
    plain_sagemaker = False
    for statement in statements:
        if statement.get("Effect") != "Allow":
            continue
        principal = statement.get("Principal", {})
        services = principal.get("Service", []) if isinstance(principal, dict) else []
        services = [services] if isinstance(services, str) else services
        statement_actions = statement.get("Action", [])
        statement_actions = [statement_actions] if isinstance(statement_actions, str) else statement_actions
        if JOB_TRUST_PRINCIPAL in services:
            actions.update(statement_actions)
        elif "sagemaker.amazonaws.com" in services:
            plain_sagemaker = True
    missing = sorted({"sts:AssumeRole", "sts:TagSession"} - actions)
    if not missing:
        return Finding("job-role-trust", True, f"{role_name} trusts {JOB_TRUST_PRINCIPAL} with AssumeRole + TagSession")
    hint = " (it trusts sagemaker.amazonaws.com, which serverless jobs do not use)" if plain_sagemaker else ""
    return Finding(
        "job-role-trust",
        False,
        f"job role {role_name} must allow {JOB_TRUST_PRINCIPAL} {' and '.join(missing)}{hint}; "
        "otherwise the job fails with 'Could not assume role'",
    )


def _job_from_arn(job_id: str) -> tuple[str, str]:
    match = re.fullmatch(r"arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]+:\d{12}:job/([A-Za-z0-9]+)/(.+)", job_id)
    if not match:
        raise BackendError(f"not a SageMaker job ARN: '{job_id}'")
    return match.group(1), match.group(2)


_PENDING_SECONDARY = {"Starting", "Pending", "Preparing", "Downloading"}


def job_status_from_description(job: Mapping[str, Any]) -> JobStatus:
    """DescribeJob → JobStatus: state, progress (incl. BillableTokenUsage), metrics and outputs."""
    primary = str(job["JobStatus"])
    secondary = str(job.get("SecondaryStatus", ""))
    if primary == "InProgress":
        state = JobState.PENDING if secondary in _PENDING_SECONDARY else JobState.RUNNING
    else:
        state = {
            "Completed": JobState.SUCCEEDED,
            "Failed": JobState.FAILED,
            "Stopping": JobState.RUNNING,
            "Stopped": JobState.STOPPED,
            "Deleting": JobState.STOPPED,
            "DeleteFailed": JobState.FAILED,
        }.get(primary, JobState.RUNNING)
    message = str(job.get("FailureReason") or f"{primary}/{secondary}")
    output = _service_output(job.get("JobConfigDocument"))
    progress: dict[str, Any] = {"secondary_status": secondary}
    info = output.get("ProgressInfo") or {}
    if "CurrentStep" in info:
        progress["step"] = info["CurrentStep"]
    if "MaxSteps" in info:
        progress["total_steps"] = info["MaxSteps"]
    elif "MaxEpoch" in info and "StepsPerEpoch" in info:
        progress["total_steps"] = info["MaxEpoch"] * info["StepsPerEpoch"]
    if "CurrentEpoch" in info:
        progress["epoch"] = info["CurrentEpoch"]
    if output.get("BillableTokenUsage"):
        progress["billable_token_usage"] = dict(output["BillableTokenUsage"])
    if output.get("RolloutInfo"):
        progress["rollouts"] = output["RolloutInfo"]
    outputs: dict[str, str] = {}
    if output.get("OutputModelPackageArn"):
        outputs["model_package_arn"] = str(output["OutputModelPackageArn"])
    for key, value in (output.get("MlflowDetails") or {}).items():
        outputs[f"mlflow_{_snake(key)}"] = str(value)
    return JobStatus(
        state=state,
        message=message,
        progress=progress,
        metrics=_numeric_metrics(output.get("EvaluationMetrics")),
        outputs=outputs,
    )


def _service_output(document: Any) -> dict[str, Any]:
    if not document:
        return {}
    try:
        parsed = json.loads(document) if isinstance(document, str) else document
    except json.JSONDecodeError:
        return {}
    output = parsed.get("ServiceOutput", {}) if isinstance(parsed, dict) else {}
    return output if isinstance(output, dict) else {}


def _numeric_metrics(raw: Any) -> dict[str, float]:
    """Evaluation metrics as flat numbers (``eval/reward/pass_at_1`` …), whether a map or a Name/Value list."""
    metrics: dict[str, float] = {}
    if isinstance(raw, dict):
        items = list(raw.items())
    elif isinstance(raw, list):
        items = [(item.get("Name") or item.get("name"), item.get("Value", item.get("value"))) for item in raw]
    else:
        return metrics
    for name, value in items:
        if isinstance(value, int | float) and not isinstance(value, bool) and name:
            metrics[str(name)] = float(value)
        elif isinstance(value, dict):
            for sub, subvalue in value.items():
                if isinstance(subvalue, int | float) and not isinstance(subvalue, bool):
                    metrics[f"{name}/{sub}"] = float(subvalue)
    return metrics


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
