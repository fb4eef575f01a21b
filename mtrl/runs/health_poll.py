"""Training health in the status poll: the rules on the run's signal rows so far, every poll.

Per poll (``check_status``): read ``runs/<run id>/signals.jsonl`` (written by the backend), evaluate it with
``mtrl.health.rules.evaluate`` — exactly what ``mtrl health`` runs —, write ``runs/<run id>/health.json``, publish
``mtrl/RunHealth`` (0 ok, 1 warn, 2 stop; dimension ``RunId``), keep the verdict on the run record and notify the
run topic once per run and rule (the record keeps which rules already notified), as the run's
``backend_options.notifications`` allows: all levels (``all``, the default), stop levels only (``failures``), none.
A backend that writes no rows yet gets no verdict; a signals file that cannot be read is recorded, never fails the
run.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from mtrl.contracts.backend import BackendError, RunContext
from mtrl.health.rules import STOP, WARN, evaluate, health_level
from mtrl.health.signals import (
    HEALTH_FILE,
    MAX_SIGNALS_BYTES,
    SIGNALS_FILE,
    SignalsError,
    parse_signals,
    standard_json,
)
from mtrl.runs.report import notification_choice
from mtrl.runs.runtime import Runtime

METRIC_NAMESPACE = "mtrl/RunHealth"
METRIC_NAME = "RunHealth"
# The same value is also published per deployment (dimension Deployment = the deployment prefix, from the backend
# settings), so one static alarm per deployment can watch every run (stacks/constructs/pipeline_alerts.py).
DEPLOYMENT_DIMENSION = "Deployment"
MAX_RECORDED_FIRINGS = 20  # the run record keeps the first ones; health.json has them all
# The run's notifications choice (backend_options.notifications) → the rule levels its health notices are sent for:
# "failures" hears only of a rule at its stop level (the run is then failing or, with early_stop, stopped).
NOTICE_LEVELS: dict[str, frozenset[str]] = {
    "all": frozenset({WARN, STOP}),
    "failures": frozenset({STOP}),
    "none": frozenset(),
}


def kept_checkpoints(adapter: Any, context: RunContext) -> dict[str, Any]:
    """What an early-stopped run keeps: the backend's ``checkpoints`` verb (the latest and the best-evaluation
    checkpoint) where it has per-step evaluation checkpoints; otherwise a record saying it has none. A failure is
    recorded, never stops the stop."""
    keep = getattr(adapter, "checkpoints", None)
    if not callable(keep):
        return {
            "latest": None,
            "best_evaluation": None,
            "note": f"the {adapter.name} backend keeps no per-step evaluation checkpoints; the stop keeps what "
            "cancelling its job keeps (see its outputs)",
        }
    try:
        return dict(keep(context))
    except BackendError as error:
        return {"latest": None, "best_evaluation": None, "error": str(error)[:500]}


def signals_key(run_id: str) -> str:
    return f"runs/{run_id}/{SIGNALS_FILE}"


def health_key(run_id: str) -> str:
    return f"runs/{run_id}/{HEALTH_FILE}"


def _read_signals(runtime: Runtime, run_id: str) -> str | None:
    try:
        answer = runtime.s3.get_object(Bucket=runtime.bucket, Key=signals_key(run_id))
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in {"NoSuchKey", "404", "NotFound"}:
            return None
        raise
    size = int(answer.get("ContentLength") or 0)
    if size > MAX_SIGNALS_BYTES:  # never read a file this large into the function's memory
        answer["Body"].close()
        raise SignalsError(f"run {run_id}: {signals_key(run_id)} is {size} bytes, over {MAX_SIGNALS_BYTES}; not read")
    body: bytes = answer["Body"].read(MAX_SIGNALS_BYTES + 1)
    return body.decode("utf-8", errors="replace")


def _notify(runtime: Runtime, run_id: str, new: list[dict[str, Any]], document: dict[str, Any]) -> None:
    if runtime.sns is None or not runtime.topic_arn:
        return
    names = ", ".join(f"{item['rule']} ({item['level']})" for item in new)
    lines = [f"Run {run_id}: training health rule(s) fired at step {document['last_step']}: {names}."]
    lines += [
        f"- {item['rule']} → {item['level']} at step {item['step']}: value {item['value']}, "
        f"threshold {item['threshold']}. {document['rules'][item['rule']]['description']}"
        for item in new
    ]
    lines.append(
        f"Details: s3://{runtime.bucket}/{health_key(run_id)} (mtrl health on s3://{runtime.bucket}/"
        f"{signals_key(run_id)}; docs/operations.md 'Training health')."
    )
    try:
        runtime.sns.publish(
            TopicArn=runtime.topic_arn,
            Subject=f"mtrl run {run_id}: training health {document['verdict']}"[:100],
            Message="\n".join(lines),
        )
    except ClientError as error:  # the poll must go on: the verdict is on the record and in health.json
        runtime.registry.set_fields(run_id, health_notify_error=str(error)[:500])


def poll_health(runtime: Runtime, run_id: str, record: dict[str, Any], *, ended: bool) -> dict[str, Any] | None:
    """Evaluate, store, publish and notify; returns the verdict document (None when the run has no rows file, or
    when reading or storing failed: that is recorded on the run and retried next poll, never fails the run)."""
    try:
        return _poll_health(runtime, run_id, record, ended=ended)
    except (ClientError, BotoCoreError, SignalsError, ValueError, ArithmeticError) as error:
        previous = dict(record.get("health") or {})
        runtime.registry.set_fields(run_id, health={**previous, "error": f"run {run_id}: {error}"[:500]})
        return None


def _poll_health(runtime: Runtime, run_id: str, record: dict[str, Any], *, ended: bool) -> dict[str, Any] | None:
    text = _read_signals(runtime, run_id)
    if text is None:
        return None
    previous = dict(record.get("health") or {})
    try:
        signals = parse_signals(text, source=f"s3://{runtime.bucket}/{signals_key(run_id)}")
    except SignalsError as error:
        runtime.registry.set_fields(run_id, health={**previous, "error": str(error)[:500]})
        return None
    now = datetime.fromtimestamp(runtime.clock(), UTC)
    document = evaluate(signals, now=now, ended=ended)
    uri = f"s3://{runtime.bucket}/{health_key(run_id)}"
    runtime.s3.put_object(
        Bucket=runtime.bucket,
        Key=health_key(run_id),
        Body=json.dumps(standard_json(document), sort_keys=True, allow_nan=False).encode(),
        ContentType="application/json",
    )
    level = health_level(document)
    if runtime.cloudwatch is not None:
        series = [{"Name": "RunId", "Value": run_id}]
        deployment = runtime.deployment
        dimensions = [series] + ([[{"Name": DEPLOYMENT_DIMENSION, "Value": str(deployment)}]] if deployment else [])
        runtime.cloudwatch.put_metric_data(
            Namespace=METRIC_NAMESPACE,
            MetricData=[
                {"MetricName": METRIC_NAME, "Dimensions": d, "Timestamp": now, "Value": float(level), "Unit": "None"}
                for d in dimensions
            ],
        )
    notified = list(previous.get("notified") or [])
    wanted = NOTICE_LEVELS[notification_choice(record)]
    new: list[dict[str, Any]] = []
    for item in document["fired"]:
        if item["level"] not in wanted:
            continue  # not sent, and not marked sent: a later stop level of the rule may still be wanted
        if item["rule"] not in notified and all(item["rule"] != seen["rule"] for seen in new):
            new.append(item)
    # Recorded before publishing: a retried poll then never sends the same rule twice (at most once per rule).
    runtime.registry.set_fields(
        run_id,
        health={
            "verdict": document["verdict"],
            "current": document["current"],
            "level": level,
            "last_step": document["last_step"],
            "planned_steps": document["planned_steps"],
            "fired": document["fired"][:MAX_RECORDED_FIRINGS],
            "notified": notified + [item["rule"] for item in new],
            "uri": uri,
            "evaluated_at": now.isoformat().replace("+00:00", "Z"),
        },
    )
    if new:
        _notify(runtime, run_id, new, document)
    return document
