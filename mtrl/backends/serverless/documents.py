"""What a serverless run sends: dataset rows in the service's format and the ``JobConfigDocument`` of each job.

Rows are ``{"prompt": "<JSON string of the task>"}``; the service passes the string to the agent verbatim, so the run's
agent-side choices (``reasoning_effort``) travel inside it under ``mtrl_agent`` and the deployed agent Lambda reads
them (``lambda/serverless_agent``). Hyperparameters are flat strings: the service's schema rejects the nested form
(reference A.9).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

from mtrl.backends._aws import S3Uri, iter_s3_lines, safe_name
from mtrl.backends.serverless.options import TRAINING_HYPERPARAMETERS
from mtrl.backends.serverless.settings import HyperValue, ServerlessSettings
from mtrl.contracts.backend import BackendError, RunContext
from mtrl.validation.rows import RowError, iter_rows

AGENT_OPTIONS_KEY = "mtrl_agent"
# What an evaluation job samples with, and what the service uses when the run sets nothing (the MTRL hyperparameters
# reference's defaults: temperature 1, top-p 1, 4096 tokens per turn). Recorded in the run summary.
EVALUATION_SAMPLING = ("temperature", "sampling_top_p", "sampling_max_tokens")
SERVICE_SAMPLING_DEFAULTS: dict[str, str] = {"temperature": "1", "sampling_top_p": "1", "sampling_max_tokens": "4096"}


def agent_options(settings: ServerlessSettings) -> dict[str, str]:
    """What the run asks of the deployed agent Lambda (nothing for an AgentCore runtime: it has its own settings)."""
    agent = settings.agent
    if agent is None or agent.kind != "lambda" or settings.reasoning_effort is None:
        return {}
    return {"reasoning_effort": settings.reasoning_effort}


def to_service_row(row: Mapping[str, Any], options: Mapping[str, str] | None = None) -> dict[str, str]:
    """One dataset row as the service wants it: ``{"prompt": "<JSON string>"}``, passed to the agent verbatim.

    Rows already in that form pass through; Nova-style rows ``{"id", "metadata": {...}}`` are flattened to
    ``{"id", "prompt", "answer", ...}``; any other object is sent whole. ``options`` (agent-side run choices) are
    added under ``mtrl_agent`` when the task is a JSON object.
    """
    if set(row) == {"prompt"} and isinstance(row["prompt"], str):
        if not options:
            return {"prompt": row["prompt"]}
        try:
            task: Any = json.loads(row["prompt"])
        except json.JSONDecodeError:
            return {"prompt": row["prompt"]}
        if not isinstance(task, dict):
            return {"prompt": row["prompt"]}
    elif isinstance(row.get("metadata"), Mapping) and "id" in row:
        task = {"id": row["id"], **row["metadata"]}
    else:
        task = dict(row)
    if options:
        task[AGENT_OPTIONS_KEY] = dict(options)
    return {"prompt": json.dumps(task, ensure_ascii=False, sort_keys=True)}


def service_rows(s3: Any, source: S3Uri, options: Mapping[str, str] | None = None) -> Iterator[dict[str, str]]:
    """The rows of ``source`` (JSONL, streamed) in the service's format; BackendError names a line that is no row."""
    try:
        for _number, row in iter_rows(iter_s3_lines(s3, source)):
            yield to_service_row(row, options)
    except RowError as error:
        raise BackendError(f"{source} {error}") from None


def convert_dataset(s3: Any, source: S3Uri, destination: S3Uri, options: Mapping[str, str] | None = None) -> int:
    """Stream ``source`` (JSONL) into ``destination`` in the service's row format; returns the row count."""
    rows = 0
    with tempfile.SpooledTemporaryFile(max_size=32 * 1024 * 1024) as buffer:
        for row in service_rows(s3, source, options):
            buffer.write(json.dumps(row, ensure_ascii=False).encode() + b"\n")
            rows += 1
        if rows == 0:
            raise BackendError(f"{source} has no rows")
        buffer.seek(0)
        s3.upload_fileobj(buffer, destination.bucket, destination.key)
    return rows


def hyperparameter_strings(values: Mapping[str, HyperValue]) -> dict[str, str]:
    """The service takes flat string values (the nested form is rejected by its schema validation)."""

    def text(value: HyperValue) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    return {name: text(value) for name, value in sorted(values.items())}


def _agent_config(settings: ServerlessSettings) -> dict[str, Any]:
    agent = settings.agent
    if agent is None:
        raise BackendError(settings.agent_problem() or "no agent")
    if agent.kind == "agentcore":
        return {"BedrockAgentCoreConfig": {"AgentRuntimeArn": agent.arn, "Qualifier": agent.qualifier}}
    return {"CustomAgentLambdaConfig": {"LambdaArn": agent.arn}}


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
    if settings.checkpoint_group_arn:
        packages["IntermediateCheckpointModelPackageGroupArn"] = settings.checkpoint_group_arn
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
        training["HyperParameters"] = hyperparameter_strings(settings.hyperparameters)
    channels = [_channel("train", train)] + ([_channel("validation", validation)] if validation else [])
    return {
        "AgentConfig": _agent_config(settings),
        "InputDataConfig": channels,
        "OutputDataConfig": output_config,
        "ModelPackageConfig": packages,
        "TrainingConfig": training,
        **_vpc(settings),
    }


def evaluation_hyperparameters(settings: ServerlessSettings) -> dict[str, str]:
    """The evaluation job's HyperParameters: flat strings, pass@k as a JSON list (reference A.9)."""
    hyper: dict[str, HyperValue] = {"eval_group_size": settings.eval_group_size, **settings.eval_hyperparameters}
    strings = hyperparameter_strings(hyper)
    strings["pass_k_values"] = json.dumps(sorted(set(settings.eval_pass_k)))
    return strings


def evaluation_sampling(settings: ServerlessSettings) -> dict[str, str]:
    """What the evaluation sampled with, in words a summary reader can use: the run's value or the service default."""
    chosen = evaluation_hyperparameters(settings)
    described = {}
    for name in EVALUATION_SAMPLING:
        if name in chosen:
            described[name] = f"{chosen[name]} (set by the run)"
        else:
            option = TRAINING_HYPERPARAMETERS[name]
            described[name] = f"service default (documented: {SERVICE_SAMPLING_DEFAULTS[name]}; {option.source})"
    described["eval_group_size"] = chosen["eval_group_size"]
    described["pass_k_values"] = chosen["pass_k_values"]
    return described


def build_evaluation_config(
    settings: ServerlessSettings,
    *,
    job_name: str,
    evaluation: S3Uri,
    output: S3Uri,
    model_package_arn: str | None,
) -> dict[str, Any]:
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
            "HyperParameters": evaluation_hyperparameters(settings),
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": settings.eval_max_runtime_seconds},
        **_vpc(settings),
    }
    if model_package_arn:
        document["ModelPackageConfig"] = {"InputModelPackageArn": model_package_arn}
    return document


def job_name_for(run_id: str, *, evaluation: bool = False, baseline: bool = False) -> str:
    """The run's training job, its evaluation job, or its baseline evaluation job (the base model, before training)."""
    prefix = "mtrl-base-" if baseline else "mtrl-eval-" if evaluation else "mtrl-"
    return safe_name(run_id, max_length=63, prefix=prefix)


def run_input_prefix(run: RunContext) -> S3Uri:
    """Converted data lives with the run's artifacts, never under the trigger prefix ``training-data/``."""
    return S3Uri.parse(run.output_uri).join("input")
