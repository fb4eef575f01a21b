"""Reading a serverless job back: ``DescribeJob`` → ``JobStatus`` (state, progress, billable tokens, outputs, metrics),
and the job role's trust check.

Where billable token usage is (botocore ``sagemaker`` 2017-07-24 service model, checked in
``tests/unit/backends/serverless/test_serverless_status.py``): ``DescribeJobResponse`` has no usage member; its
``JobConfigDocument`` is a JSON string whose ``ServiceOutput.BillableTokenUsage`` the service fills for AgentRFT and
AgentRFTEvaluation jobs (the AWS ML Blog's Wordle hands-on guide: "token usage can be read from DescribeJob's
BillableTokenUsage"). ``DescribeTrainingSession``'s ``TrainingSessionDetail.BillableTokenUsage`` belongs to a
different resource (training sessions, ``CreateTrainingSession``) that a ``CreateJob`` run never creates. The model's
``BillableTokenUsage`` shape names the counters ``PrefillTokenCount``, ``SampleTokenCount`` and
``TrainingTokenCount``; the Wordle sample printed ``TrainTokenCount``. Both spellings are read; the run record keeps
the model's names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from mtrl.backends.serverless.settings import JOB_TRUST_PRINCIPAL
from mtrl.contracts.backend import BackendError, Finding, JobState, JobStatus

# Our name → the spellings the service output may use (the botocore shape's member first).
TOKEN_COUNTERS: dict[str, tuple[str, ...]] = {
    "prefill": ("PrefillTokenCount",),
    "sample": ("SampleTokenCount",),
    "train": ("TrainingTokenCount", "TrainTokenCount"),
}
_PENDING_SECONDARY = {"Starting", "Pending", "Preparing", "Downloading"}


def billable_token_usage(output: Mapping[str, Any]) -> dict[str, int] | None:
    """``ServiceOutput.BillableTokenUsage`` with the model's field names, or None when the job reports none yet."""
    raw = output.get("BillableTokenUsage")
    if not isinstance(raw, Mapping) or not raw:
        return None
    usage: dict[str, int] = {}
    for spellings in TOKEN_COUNTERS.values():
        for name in spellings:
            value = raw.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                usage[spellings[0]] = value
                break
    return usage or None


def usage_for_cost(usage: Mapping[str, int]) -> dict[str, int]:
    """The usage in the cost calculator's own names (``prefill``/``sample``/``train``)."""
    return {ours: int(usage.get(spellings[0], 0)) for ours, spellings in TOKEN_COUNTERS.items()}


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
    output = service_output(job.get("JobConfigDocument"))
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
    usage = billable_token_usage(output)
    if usage:
        progress["billable_token_usage"] = usage
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


def service_output(document: Any) -> dict[str, Any]:
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


def job_from_arn(job_id: str) -> tuple[str, str]:
    match = re.fullmatch(r"arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]+:\d{12}:job/([A-Za-z0-9]+)/(.+)", job_id)
    if not match:
        raise BackendError(f"not a SageMaker job ARN: '{job_id}'")
    return match.group(1), match.group(2)


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
