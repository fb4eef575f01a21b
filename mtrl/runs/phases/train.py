"""Submit and Train: start the training job once, then poll it (health rules, early stop, deadline, budget)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from mtrl.contracts.backend import JobState
from mtrl.contracts.errors import BudgetExceeded, EarlyStopped, InternalError, JobFailed, RunTimedOut
from mtrl.health.rules import INCOMPLETE, STOP, stop_rules
from mtrl.runs.health_poll import kept_checkpoints, poll_health
from mtrl.runs.phases.context import Event, backend_call, parse_time, run_id_of
from mtrl.runs.phases.run_view import RunView
from mtrl.runs.registry import RunStatus
from mtrl.runs.runtime import Runtime


def submit(runtime: Runtime, event: Event) -> dict[str, Any]:
    run_id = run_id_of(event)
    registry = runtime.registry
    record = registry.set_status(run_id, RunStatus.SUBMITTING, phase="submit")
    if record.get("job_id"):  # a retried submit must never start a second job
        registry.end_phase(run_id, "submit", job_id=record["job_id"])
        registry.set_status(run_id, RunStatus.TRAINING, phase="train")
        return {"job_id": record["job_id"]}
    runtime.slots.renew(run_id)
    run = RunView(runtime, record)
    job_id = backend_call(run_id, "submit", lambda: run.adapter.submit(run.context))
    now = runtime.clock()
    deadline = datetime.fromtimestamp(now + run.settings.run_timeout_minutes * 60, UTC)
    registry.set_fields(
        run_id, job_id=job_id, job_state=JobState.PENDING.value, deadline=deadline.isoformat().replace("+00:00", "Z")
    )
    registry.end_phase(run_id, "submit", job_id=job_id)
    registry.set_status(run_id, RunStatus.TRAINING, phase="train")
    return {"job_id": job_id}


def check_status(runtime: Runtime, event: Event) -> dict[str, Any]:
    run_id = run_id_of(event)
    registry = runtime.registry
    record = registry.get(run_id)
    job_id = record.get("job_id")
    if not job_id:
        raise InternalError(f"run {run_id}: no job was submitted")
    runtime.slots.renew(run_id)
    run = RunView(runtime, record)
    status = backend_call(run_id, "job status", lambda: run.adapter.status(run.context, job_id))
    cost = {"usd": status.metrics["cost_usd"]} if "cost_usd" in status.metrics else record.get("cost")
    registry.set_job_status(
        run_id,
        status.state.value,
        job_message=status.message,
        progress=dict(status.progress),
        metrics={k: v for k, v in status.metrics.items() if k != "cost_usd"} or record.get("metrics"),
        outputs=dict(status.outputs) or record.get("outputs"),
        cost=cost,
        last_polled_at=datetime.fromtimestamp(runtime.clock(), UTC).isoformat().replace("+00:00", "Z"),
    )
    health = poll_health(runtime, run_id, record, ended=status.state.terminal)
    if health is not None and not status.state.terminal:
        _early_stop(run, job_id, health)
    if status.state is JobState.SUCCEEDED:
        if health is not None and health["verdict"] == INCOMPLETE:
            # A "success" that trained fewer steps than planned (verl #5725: a silent 0-step exit) is a failure.
            registry.end_phase(run_id, "train", "failed")
            raise JobFailed(
                f"run {run_id}: training job {job_id} ended SUCCEEDED after step {health['last_step']} of "
                f"{health['planned_steps']} planned (health rule 'incomplete')"
            )
        registry.end_phase(run_id, "train")
        return {"done": True, "state": status.state.value}
    if status.state in (JobState.FAILED, JobState.STOPPED):
        registry.end_phase(run_id, "train", "failed")
        raise JobFailed(f"run {run_id}: training job {job_id} ended {status.state.value}: {status.message}")
    settings = run.settings
    if runtime.clock() > parse_time(record["deadline"]).timestamp():
        registry.end_phase(run_id, "train", "timed out")
        raise RunTimedOut(
            f"run {run_id}: training job {job_id} still {status.state.value} after "
            f"{settings.run_timeout_minutes} minutes (run_timeout_minutes)"
        )
    spent = (cost or {}).get("usd")
    if settings.max_budget_usd is not None and spent is not None and spent > settings.max_budget_usd:
        registry.end_phase(run_id, "train", "over budget")
        raise BudgetExceeded(f"run {run_id}: cost {spent:.2f} USD exceeds max_budget_usd {settings.max_budget_usd}")
    return {"done": False, "state": status.state.value}


def _early_stop(run: RunView, job_id: str, health: Mapping[str, Any]) -> None:
    """``early_stop``: a rule at its stop level cancels the job through its backend (which keeps its latest
    state); the run then ends STOPPED with ``stop_reason`` naming the rule."""
    run_id = run.run_id
    wanted = run.settings.early_stop
    if not wanted:
        return
    rules = stop_rules(dict(health), None if wanted is True else wanted.rules)
    if not rules:
        return
    fired = [item for item in health["fired"] if item["rule"] == rules[0] and item["level"] == STOP][-1]
    reason = (
        f"early_stop: training-health rule '{fired['rule']}' reached its stop level at step {fired['step']} "
        f"(value {fired['value']:.4g}, threshold {fired['threshold']:.4g})"
    )
    backend_call(run_id, "cancelling the job (early_stop)", lambda: run.adapter.cancel(run.context, job_id))
    kept = kept_checkpoints(run.adapter, run.context)
    run.runtime.registry.set_fields(
        run_id,
        job_state=JobState.STOPPED.value,
        job_message=reason,
        stop_reason=reason,
        stop_rule=fired["rule"],
        stop_checkpoints=kept,
    )
    run.runtime.registry.end_phase(run_id, "train", "stopped")
    raise EarlyStopped(f"run {run_id}: {reason}")
