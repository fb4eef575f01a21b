"""Preflight and Provision: the backend's checks before anything is created, then its resources (a wait loop)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mtrl.backends.pricing import budget_finding
from mtrl.contracts.backend import BackendError
from mtrl.contracts.errors import BackendFailed, InternalError, PipelineError, PreflightFailed
from mtrl.runs.phases.context import Event, backend_call, parse_time, run_id_of
from mtrl.runs.phases.inputs import INPUTS_FIELD, adapter_settings
from mtrl.runs.phases.run_view import RunView
from mtrl.runs.registry import RunStatus
from mtrl.runs.runtime import Runtime


def preflight(runtime: Runtime, event: Event) -> dict[str, Any]:
    run_id = run_id_of(event)
    registry = runtime.registry
    record = registry.set_status(run_id, RunStatus.PREFLIGHT, phase="preflight")
    runtime.slots.renew(run_id)
    run = RunView(runtime, record)
    settings = run.settings
    if settings.eval_split > 0 and not settings.eval_dataset and not record["validation"].get("splits"):
        # Never fall back to the whole upload: the backend would train on the rows held out for evaluation.
        raise InternalError(f"run {run_id}: eval_split={settings.eval_split} but validation wrote no split files")
    adapter = run.adapter
    run = _store_effective_settings(run)  # this function holds the deploy-time backend settings
    findings = backend_call(run_id, "preflight", lambda: adapter.preflight(run.context))
    budget = budget_finding(run.context, adapter)  # every backend: a budget is enforced or the run is refused
    if budget is not None:
        findings = [*findings, budget]
    failed = [finding for finding in findings if not finding.ok]
    registry.end_phase(
        run_id,
        "preflight",
        "failed" if failed else "ok",
        findings=[{"check": f.check, "ok": f.ok, "message": f.message} for f in findings],
    )
    if failed:
        raise PreflightFailed(f"run {run_id}: " + "; ".join(f"{f.check}: {f.message}" for f in failed))
    return {"checks": len(findings)}


def provision(runtime: Runtime, event: Event) -> dict[str, Any]:
    """One provisioning step. ``ready`` False: not there yet (GPUs arriving, a stack deploying); the state
    machine waits ``provision_poll_seconds`` and calls again, until ``provision_max_wait_minutes``."""
    run_id = run_id_of(event)
    registry = runtime.registry
    record = registry.set_status(run_id, RunStatus.PROVISIONING, phase="provision")
    runtime.slots.renew(run_id)
    run = RunView(runtime, record)
    try:
        created = run.adapter.provision(run.context)
    except PipelineError:
        raise
    except BackendError as error:
        if not error.transient:
            raise BackendFailed(f"run {run_id}: provision: {error}") from error
        # A scale-up takes many minutes: wait in the state machine (bounded), not in a giant Retry.
        started = parse_time(record["phases"]["provision"]["started_at"]).timestamp()
        waited = runtime.clock() - started
        limit = runtime.settings.provision_max_wait_minutes
        if waited > limit * 60:
            registry.end_phase(run_id, "provision", "timed out", waiting_for=str(error))
            raise BackendFailed(
                f"run {run_id}: provisioning did not finish within {limit} minutes (provision_max_wait_minutes); "
                f"last state: {error}"
            ) from error
        registry.set_fields(run_id, provision_waiting_for=str(error))
        return {"ready": False, "waiting_for": str(error)}
    for resource in created:  # adapters record before creating; this catches any they returned only
        registry.record_resource(run_id, resource)
    registry.set_fields(run_id, provision_waiting_for=None)
    registry.end_phase(run_id, "provision", resources=len(created))
    return {"ready": True, "resources": len(created)}


def _store_effective_settings(run: RunView) -> RunView:
    """Complete the stored inputs with the effective settings, once (a retried Preflight keeps what the first one
    stored); returns the view of the record as now stored."""
    if run.inputs.settings is not None:
        return run
    effective = backend_call(run.run_id, "preflight", lambda: adapter_settings(run.runtime, run.record, run.settings))
    stored = replace(run.inputs, settings=effective).to_record()
    return run.updated(run.runtime.registry.set_fields(run.run_id, **{INPUTS_FIELD: stored}))
