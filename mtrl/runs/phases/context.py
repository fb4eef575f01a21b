"""What every phase shares: reading the event, the error mapping and writing a run's documents (the run itself:
``run_view``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from mtrl.contracts.backend import BackendError
from mtrl.contracts.errors import BackendFailed, InternalError, PipelineError, TransientError
from mtrl.runs.registry import raise_for_client_error
from mtrl.runs.runtime import Runtime

Event = Mapping[str, Any]
Phase = Callable[[Runtime, Event], dict[str, Any]]


def run_id_of(event: Event) -> str:
    run_id = event.get("run_id")
    if not isinstance(run_id, str) or not run_id:
        raise InternalError(f"event has no run_id: {json.dumps(event, default=str)[:300]}")
    return run_id


def state_of(event: Event) -> dict[str, Any]:
    return dict(event.get("state") or {})


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def iso_time(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z")


def backend_call(run_id: str, what: str, call: Callable[[], Any]) -> Any:
    """Call the adapter, mapping its errors onto the pipeline's (transient ones are retried)."""
    try:
        return call()
    except PipelineError:
        raise
    except BackendError as error:
        if error.transient:
            raise TransientError(f"run {run_id}: {what}: {error}") from error
        raise BackendFailed(f"run {run_id}: {what}: {error}") from error


def put_json(runtime: Runtime, key: str, document: Any, run_id: str) -> None:
    if not key.startswith("runs/"):  # the pipeline never writes where uploads start runs
        raise InternalError(f"run {run_id}: refusing to write {key} outside runs/")
    try:
        runtime.s3.put_object(
            Bucket=runtime.bucket,
            Key=key,
            Body=json.dumps(document, indent=2, sort_keys=True, default=str).encode(),
            ContentType="application/json",
        )
    except ClientError as error:
        raise_for_client_error(error, f"run {run_id}: writing s3://{runtime.bucket}/{key}")
