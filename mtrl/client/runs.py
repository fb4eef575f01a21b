"""Read and control runs of a deployed mtrl: the run table's records, executions, logs and cost."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from mtrl.client.deployment import Deployment, error_code, execution_arn
from mtrl.runs.registry import RunNotFound, RunRegistry, RunStatus, decode_item
from mtrl.runs.report import baseline_comparison

if TYPE_CHECKING:
    from mtrl.cost import CostEstimate

LISTING_INDEX = "by_kind"  # stacks.constructs.data_store.RUN_TABLE_LISTING_INDEX (not imported: it pulls in CDK)
RUN_KIND = "run"
CANCEL_ERROR = "mtrl.Cancelled"
# The order phases happen in (the record's ``phases`` map is unordered once stored).
PHASE_ORDER = (
    "register",
    "slot",
    "validate",
    "preflight",
    "provision",
    "baseline",
    "submit",
    "train",
    "evaluate",
    "teardown",
)

__all__ = ["RunNotFound", "RunStatus"]


def registry(dynamodb: Any, deployment: Deployment) -> RunRegistry:
    return RunRegistry(dynamodb, deployment.run_table)


def list_runs(dynamodb: Any, deployment: Deployment, *, limit: int = 20) -> list[dict[str, Any]]:
    """Run records newest first, from the listing index (``kind=run``, sorted by ``created_at``)."""
    runs: list[dict[str, Any]] = []
    request: dict[str, Any] = {
        "TableName": deployment.run_table,
        "IndexName": LISTING_INDEX,
        "KeyConditionExpression": "kind = :kind",
        "ExpressionAttributeValues": {":kind": {"S": RUN_KIND}},
        "ScanIndexForward": False,
        "Limit": min(limit, 100),
    }
    while len(runs) < limit:
        page = dynamodb.query(**request)
        runs.extend(decode_item(item) for item in page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            break
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    return runs[:limit]


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _seconds(start: Any, end: Any, now: datetime) -> float | None:
    begun = _time(start)
    if begun is None:
        return None
    ended = _time(end) or now
    return round(max((ended - begun).total_seconds(), 0.0), 3)


def current_phase(record: Mapping[str, Any]) -> str | None:
    """The last phase that started and has not ended (None once the run is final or before register)."""
    if RunStatus(record["status"]).terminal:
        return None
    phases = record["phases"]
    open_phases = [name for name in PHASE_ORDER if name in phases and "ended_at" not in phases[name]]
    return open_phases[-1] if open_phases else None


def run_view(record: Mapping[str, Any], *, now: datetime | None = None) -> dict[str, Any]:
    """The facts `mtrl status` and `mtrl runs` show, as plain JSON-able values."""
    now = now or datetime.now(UTC)
    status = RunStatus(record["status"])
    settings = record.get("settings") or {}
    phases = record["phases"]
    metrics = record.get("metrics") or {}
    ordered = [name for name in PHASE_ORDER if name in phases] + sorted(set(phases) - set(PHASE_ORDER))
    return {
        "run_id": record["run_id"],
        "status": status.value,
        "final": status.terminal,
        "phase": current_phase(record),
        "backend": settings.get("backend"),
        "environment": settings.get("environment"),
        "dataset_uri": (record.get("dataset") or {}).get("uri"),
        "created_at": record["created_at"],
        "finished_at": record.get("finished_at"),
        "elapsed_seconds": _seconds(record["created_at"], record.get("finished_at"), now),
        "phases": [
            {
                "name": name,
                "started_at": phases[name].get("started_at"),
                "ended_at": phases[name].get("ended_at"),
                "seconds": _seconds(phases[name].get("started_at"), phases[name].get("ended_at"), now),
                "outcome": phases[name].get("outcome"),
            }
            for name in ordered
        ],
        "queue_position": record.get("queue_position"),
        "job_id": record.get("job_id"),
        "job_state": record.get("job_state"),
        "progress": record.get("progress") or {},
        "reward_mean": metrics.get("reward_mean"),
        "metrics": metrics,
        "evaluation": record.get("evaluation") or {},
        "evaluation_measure": (record.get("evaluation_settings") or {}).get("evaluation_measure"),
        "baseline": baseline_comparison(record),
        "cost_usd": (record.get("cost") or {}).get("usd"),
        "validation": record.get("validation"),
        "error": record.get("error"),
        "teardown_error": record.get("teardown_error"),
        "health": record.get("health"),  # the training-health verdict of the last status poll (mtrl.health)
    }


# -- cancel -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CancelResult:
    run_id: str
    execution_arn: str
    stopped: bool  # False: the execution had already ended
    execution_status: str | None


def cancel(stepfunctions: Any, deployment: Deployment, run_id: str, record: Mapping[str, Any] | None) -> CancelResult:
    """Stop the run's execution (StopExecution). Teardown is not done here: the pipeline's reaper reacts to
    the execution's ABORTED status change, runs the backend's teardown (cancels the job, removes every
    recorded resource, frees the slot) and reports the run as ABORTED."""
    arn = (record or {}).get("execution_arn") or execution_arn(deployment.state_machine_arn, run_id)
    try:
        described = stepfunctions.describe_execution(executionArn=arn)
    except ClientError as error:
        if error_code(error) == "ExecutionDoesNotExist":
            raise RunNotFound(f"run {run_id} has no pipeline execution") from None
        raise
    if described["status"] != "RUNNING":
        return CancelResult(run_id, arn, False, described["status"])
    stepfunctions.stop_execution(
        executionArn=arn, error=CANCEL_ERROR, cause=f"run {run_id} cancelled with `mtrl cancel`"
    )
    return CancelResult(run_id, arn, True, "ABORTED")


def execution_status(stepfunctions: Any, deployment: Deployment, run_id: str) -> str | None:
    """RUNNING / SUCCEEDED / FAILED / TIMED_OUT / ABORTED, or None when the trigger has not started one."""
    try:
        response = stepfunctions.describe_execution(executionArn=execution_arn(deployment.state_machine_arn, run_id))
    except ClientError as error:
        if error_code(error) == "ExecutionDoesNotExist":
            return None
        raise
    return str(response["status"])


# -- logs -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LogLine:
    timestamp: int  # milliseconds since the epoch
    group: str
    stream: str
    message: str
    event_id: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "time": datetime.fromtimestamp(self.timestamp / 1000, UTC).isoformat(timespec="milliseconds"),
            "log_group": self.group,
            "log_stream": self.stream,
            "message": self.message,
        }


def log_lines(
    logs: Any, deployment: Deployment, run_id: str, *, start_ms: int | None = None
) -> tuple[list[LogLine], list[str]]:
    """Every log event mentioning the run id, across the pipeline's log groups, oldest first.

    Returns (lines, log groups that do not exist yet — a function that never ran has no group)."""
    lines: list[LogLine] = []
    missing: list[str] = []
    for group in deployment.log_groups:
        try:
            for event in _filter(logs, group, run_id, start_ms):
                lines.append(
                    LogLine(
                        int(event["timestamp"]),
                        group,
                        event.get("logStreamName", ""),
                        event.get("message", "").rstrip("\n"),
                        # Event ids need not be unique across groups (moto numbers them per stream).
                        f"{group}/{event.get('logStreamName')}/{event.get('eventId') or event['timestamp']}",
                    )
                )
        except ClientError as error:
            if error_code(error) != "ResourceNotFoundException":
                raise
            missing.append(group)
    lines.sort(key=lambda line: (line.timestamp, line.group, line.event_id))
    return lines, missing


def _filter(logs: Any, group: str, run_id: str, start_ms: int | None) -> Iterator[dict[str, Any]]:
    # A quoted term matches the exact run id (ids contain '-', which unquoted patterns would treat as syntax).
    request: dict[str, Any] = {"logGroupName": group, "filterPattern": f'"{run_id}"'}
    if start_ms is not None:
        request["startTime"] = start_ms
    for page in logs.get_paginator("filter_log_events").paginate(**request):
        yield from page.get("events", [])


# -- cost -------------------------------------------------------------------------------------------------
def run_cost(record: Mapping[str, Any], *, region: str, now: datetime | None = None) -> CostEstimate:
    """The run's cost from its record, priced by its backend (``mtrl.backends.pricing``; raises CostError).

    The backend's modules load only for a run of it, so `mtrl status` starts without every backend.
    """
    # The price book's models load only for a cost: `mtrl status` and `--help` start without pydantic.
    from mtrl.backends.pricing import cost_of_record  # noqa: PLC0415

    return cost_of_record(record, region=region, now=now)


# -- which execution did an upload start? -------------------------------------------------------------------
def started_run_for_upload(
    stepfunctions: Any, deployment: Deployment, *, run_id: str, key: str, version_id: str | None
) -> str | None:
    """The run id of the execution the trigger started for this upload, found by its input.

    Normally that is ``run_id`` itself. An S3 event without ``version-id`` (MiniStack's EventBridge events
    omit it; AWS sends it for versioned buckets) makes the trigger hash the version as ``null``: same stem
    and time, another digest. Executions are matched on bucket, key and a version id that is ours or absent.
    """
    stem_and_time = run_id.rsplit("-", 1)[0] + "-"
    pages = stepfunctions.get_paginator("list_executions").paginate(
        stateMachineArn=deployment.state_machine_arn, PaginationConfig={"MaxItems": 200, "PageSize": 100}
    )
    for page in pages:
        for execution in page.get("executions", []):
            name = str(execution["name"])
            if name == run_id:
                return name
            if not name.startswith(stem_and_time):
                continue
            described = stepfunctions.describe_execution(executionArn=execution["executionArn"])
            try:
                started = json.loads(described.get("input") or "{}")
            except json.JSONDecodeError:
                continue
            if (
                started.get("bucket") == deployment.bucket
                and started.get("key") == key
                and started.get("version_id") in {version_id, None}
            ):
                return name
    return None
