"""Report: finalize the record, write ``summary.json``, free the slot and publish the run's one notification."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from mtrl.contracts.errors import EarlyStopped, TransientError, in_plain_words
from mtrl.runs.phases.context import Event, put_json, run_id_of, state_of
from mtrl.runs.registry import RunStatus
from mtrl.runs.report import build_summary, cause_text, notification, notification_choice
from mtrl.runs.runtime import Runtime


def _final_status(error: str | None) -> RunStatus:
    if not error:
        return RunStatus.SUCCEEDED
    if error in {"RunTimedOut", "ExecutionTimedOut", "States.Timeout"}:
        return RunStatus.TIMED_OUT
    if error == "Aborted":
        return RunStatus.ABORTED
    if error == EarlyStopped.__name__:
        return RunStatus.STOPPED
    return RunStatus.FAILED


def report(runtime: Runtime, event: Event) -> dict[str, Any]:
    """Finalize the record, write summary.json, free the slot and publish the run's one notification."""
    run_id = run_id_of(event)
    state = state_of(event)
    registry = runtime.registry
    failure = state.get("failure") or None
    teardown_failure = state.get("teardown_failure") or None
    if registry.find(run_id) is None:  # registration itself never succeeded
        registry.create(run_id, {"execution_arn": event.get("execution_arn"), "dataset": _dataset_from(state)})
    error_info = None
    if failure:
        name = str(failure.get("error") or "States.TaskFailed")
        error_info = {
            "step": failure.get("step"),
            "error": name,
            "plain": in_plain_words(name),
            "cause": cause_text(failure.get("cause")),
        }
    if teardown_failure:
        # A Catch result has "Error"/"Cause"; the reaper builds lowercase keys.
        name = str(teardown_failure.get("Error") or teardown_failure.get("error") or "TeardownIncomplete")
        cause = cause_text(teardown_failure.get("Cause") or teardown_failure.get("cause"))
        registry.set_fields(run_id, teardown_error=cause)
        if error_info is None:
            error_info = {"step": "Teardown", "error": name, "plain": in_plain_words(name), "cause": cause}
    record = registry.finish(run_id, _final_status(error_info["error"] if error_info else None), error=error_info)
    runtime.slots.release(run_id)  # teardown released it; this covers the paths where teardown failed
    record = registry.get(run_id)
    summary = build_summary(record, bucket=runtime.bucket)
    put_json(runtime, f"runs/{run_id}/summary.json", summary, run_id)
    if runtime.topic_arn and _wants_notification(record) and registry.claim_notification(run_id):
        subject, body = notification(summary)
        try:
            runtime.sns.publish(TopicArn=runtime.topic_arn, Subject=subject, Message=body)
        except ClientError as error:
            registry.set_fields(run_id, notified_at=None)  # let the retry publish it
            raise TransientError(f"run {run_id}: publishing the notification failed: {error}") from error
    final = record["status"]
    return {
        "status": final,
        "failed": final != RunStatus.SUCCEEDED.value,
        "error": (record.get("error") or {}).get("error") or "",
        "cause": (record.get("error") or {}).get("cause") or "",
        "summary_uri": summary["summary_uri"],
    }


def _wants_notification(record: Mapping[str, Any]) -> bool:
    """A run's ``backend_options.notifications`` (``report.notification_choice``): all, failures, none."""
    choice = notification_choice(record)
    if choice == "none":
        return False
    return choice != "failures" or str(record["status"]) != RunStatus.SUCCEEDED.value


def _dataset_from(state: Mapping[str, Any]) -> dict[str, Any]:
    if not state.get("bucket") or not state.get("key"):
        return {}
    return {
        "bucket": state["bucket"],
        "key": state["key"],
        "version_id": state.get("version_id"),
        "uri": f"s3://{state['bucket']}/{state['key']}",
    }
