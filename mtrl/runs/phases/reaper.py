"""The reaper: an execution that ended without reaching Report (aborted, machine timeout, a failure outside a
step) gets its teardown and its report all the same."""

from __future__ import annotations

import json
from typing import Any

from mtrl.contracts.errors import PipelineError, TeardownIncomplete
from mtrl.runs.phases.context import Event
from mtrl.runs.phases.report import report
from mtrl.runs.phases.teardown import teardown
from mtrl.runs.registry import RunStatus
from mtrl.runs.runtime import Runtime


def reap(runtime: Runtime, event: Event) -> dict[str, Any]:
    """Handle a Step Functions 'Execution Status Change' event: teardown + report if the run never got there."""
    detail = event.get("detail") or {}
    status = detail.get("status")
    run_id = detail.get("name")
    if status not in {"ABORTED", "TIMED_OUT", "FAILED"} or not run_id:
        return {"reaped": False}
    registry = runtime.registry
    record = registry.find(run_id)
    if record is None:
        runtime.slots.release(run_id)
        return {"reaped": False}
    if record.get("notified_at") and RunStatus(record["status"]).terminal:
        return {"reaped": False}  # the execution reported the run itself
    open_phases = [name for name, entry in record["phases"].items() if "ended_at" not in entry]
    step = STEP_OF_PHASE.get(open_phases[-1], open_phases[-1]) if open_phases else record["status"]
    error = {"ABORTED": "Aborted", "TIMED_OUT": "ExecutionTimedOut"}.get(status, "States.Runtime")
    cause = {
        "ABORTED": "the execution was stopped (StopExecution) before the run finished",
        "TIMED_OUT": "the execution reached the state machine's TimeoutSeconds",
    }.get(status, detail.get("cause") or "the execution failed outside a step")
    state: dict[str, Any] = {"failure": {"step": step, "error": error, "cause": cause}}
    try:
        _invoke_teardown(runtime, run_id)
    except PipelineError as failure:
        state["teardown_failure"] = {"error": type(failure).__name__, "cause": str(failure)}
    return {"reaped": True, **report(runtime, {"run_id": run_id, "state": state})}


def _invoke_teardown(runtime: Runtime, run_id: str) -> None:
    """Run teardown in the backend function (which holds the backend permissions), synchronously."""
    if runtime.lambda_client is None or runtime.backend_function is None:
        teardown(runtime, {"run_id": run_id})
        return
    response = runtime.lambda_client.invoke(
        FunctionName=runtime.backend_function,
        InvocationType="RequestResponse",
        Payload=json.dumps({"action": "teardown", "run_id": run_id}).encode(),
    )
    payload = response["Payload"].read()
    if response.get("FunctionError"):
        try:
            message = json.loads(payload).get("errorMessage", "")
        except (json.JSONDecodeError, AttributeError):
            message = payload.decode(errors="replace")
        raise TeardownIncomplete(f"run {run_id}: teardown failed: {message}")


# Phase names on the run record → the state names notifications use.
STEP_OF_PHASE = {
    "register": "Register",
    "slot": "AcquireSlot",
    "validate": "Validate",
    "preflight": "Preflight",
    "provision": "Provision",
    "submit": "Submit",
    "train": "Train",
    "baseline": "Baseline",
    "evaluate": "Evaluate",
    "teardown": "Teardown",
}
