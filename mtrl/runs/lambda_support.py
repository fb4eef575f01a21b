"""Lambda entry-point plumbing shared by the pipeline functions: logging, tracing, error mapping.

Every error leaving a function is a ``PipelineError`` subclass whose class name is the Step Functions
error name (so the state machine can tell transient from permanent failures) and whose message names
the run.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from typing import Any, cast

from aws_lambda_powertools import Logger, Tracer
from botocore.exceptions import BotoCoreError, ClientError

from mtrl.contracts.errors import InternalError, PipelineError, TransientError
from mtrl.runs.registry import raise_for_client_error
from mtrl.runs.runtime import Runtime, runtime_from_env

logger = Logger(service="mtrl-pipeline")
# The layer ships the X-Ray SDK (requirements/lambda.in). Powertools' Tracer imports it even when
# disabled, so without it (e.g. an interpreter that lacks it) no Tracer is built at all and the
# functions keep only the segments of active tracing. Powertools itself turns tracing off outside Lambda.
tracer = Tracer(service="mtrl-pipeline") if importlib.util.find_spec("aws_xray_sdk") is not None else None

Handler = Callable[[Runtime, Mapping[str, Any]], dict[str, Any]]


def _run_id_of(event: Any) -> str:
    """The run id (or the uploaded key) an event is about, for log keys and messages; "?" when it has none."""
    if not isinstance(event, Mapping):
        return "?"
    if isinstance(event.get("run_id"), str):
        return str(event["run_id"])
    detail = event.get("detail")
    if isinstance(detail, Mapping):
        obj = detail.get("object")
        key = obj.get("key") if isinstance(obj, Mapping) else None
        return str(detail.get("name") or key or "?")
    return "?"


def invoke(handler: Handler, event: Mapping[str, Any]) -> dict[str, Any]:
    run_id = _run_id_of(event)
    logger.append_keys(run_id=run_id, action=event.get("action") if isinstance(event, Mapping) else None)
    try:
        result = handler(runtime_from_env(), event)
    except PipelineError as error:
        logger.warning("phase failed", extra={"error": type(error).__name__, "cause": str(error)})
        if run_id not in str(error):
            raise type(error)(f"run {run_id}: {error}") from error
        raise
    except ClientError as error:
        logger.exception("AWS call failed")
        raise_for_client_error(error, f"run {run_id}")  # always raises TransientError or InternalError
        raise
    except BotoCoreError as error:  # connection problems and the like
        logger.exception("AWS connection failed")
        raise TransientError(f"run {run_id}: {error}") from error
    except Exception as error:
        logger.exception("unexpected failure")
        raise InternalError(f"run {run_id}: {type(error).__name__}: {error}") from error
    logger.info("phase done", extra={"result": result})
    return result


def lambda_entry(handler: Handler) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    def entry(event: dict[str, Any], _context: Any) -> dict[str, Any]:
        return invoke(handler, event)

    if tracer is None:
        return entry
    return cast(
        Callable[[dict[str, Any], Any], dict[str, Any]], tracer.capture_lambda_handler(capture_response=False)(entry)
    )


def dispatch(actions: Mapping[str, Handler]) -> Handler:
    """One function serving several phases, chosen by the event's ``action``."""

    def handler(runtime: Runtime, event: Mapping[str, Any]) -> dict[str, Any]:
        action = event.get("action")
        phase = actions.get(str(action))
        if phase is None:
            raise InternalError(f"unknown action {action!r} (known: {', '.join(sorted(actions))})")
        return phase(runtime, event)

    return handler
