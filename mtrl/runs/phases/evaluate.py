"""Baseline and Evaluate: the evaluation wait loop, before training (the base model) and after it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mtrl.contracts.backend import BackendError
from mtrl.contracts.errors import BackendFailed, ConfigurationError, PipelineError
from mtrl.runs.phases.context import Event, backend_call, parse_time, run_id_of
from mtrl.runs.phases.run_view import RunView
from mtrl.runs.registry import RunStatus
from mtrl.runs.runtime import Runtime


def _evaluation_step(
    run: RunView, phase: str, what: str, call: Callable[[], Mapping[str, float]]
) -> dict[str, float] | None:
    """One step of an evaluation wait loop: the metrics, or None while the evaluation job still runs (a transient
    BackendError), bounded by ``evaluation_max_wait_minutes`` from the phase's start."""
    runtime, run_id = run.runtime, run.run_id
    registry = runtime.registry
    try:
        return dict(call() or {})
    except PipelineError:
        raise
    except BackendError as error:
        if not error.transient:
            registry.end_phase(run_id, phase, "failed")
            raise BackendFailed(f"run {run_id}: {what}: {error}") from error
        # An evaluation job takes minutes: wait in the state machine (bounded), not in a giant Retry.
        started = parse_time(run.record["phases"][phase]["started_at"]).timestamp()
        limit = runtime.settings.evaluation_max_wait_minutes
        if runtime.clock() - started > limit * 60:
            registry.end_phase(run_id, phase, "timed out", waiting_for=str(error))
            raise BackendFailed(
                f"run {run_id}: the {what} did not finish within {limit} minutes (evaluation_max_wait_minutes); "
                f"last state: {error}"
            ) from error
        registry.set_fields(run_id, evaluation_waiting_for=str(error))
        return None


def _evaluation_settings(run: RunView) -> dict[str, Any]:
    """What was scored (sampling settings, the evaluation measure), so the summary's metrics can be read correctly."""
    described = getattr(run.adapter, "evaluation_settings", None)
    if not callable(described):
        return {}
    return {"evaluation_settings": backend_call(run.run_id, "evaluation settings", lambda: described(run.context))}


def baseline(runtime: Runtime, event: Event) -> dict[str, Any]:
    """One step of the baseline evaluation before training (the base model on the held-out split; the run asked
    for it with ``baseline_evaluation``). ``done`` False: the job still runs; the state machine waits
    ``evaluation_poll_seconds`` and calls again, until ``evaluation_max_wait_minutes``."""
    run_id = run_id_of(event)
    registry = runtime.registry
    record = registry.set_status(run_id, RunStatus.EVALUATING_BASELINE, phase="baseline")
    runtime.slots.renew(run_id)
    run = RunView(runtime, record)
    adapter = run.adapter
    measure = getattr(adapter, "baseline", None)
    if not callable(measure):  # manifest validation refuses this; a record from elsewhere must not pass silently
        registry.end_phase(run_id, "baseline", "failed")
        raise ConfigurationError(f"run {run_id}: backend '{adapter.name}' cannot evaluate a baseline before training")
    metrics = _evaluation_step(run, "baseline", "baseline evaluation", lambda: measure(run.context))
    if metrics is None:
        return {"done": False}
    registry.set_fields(run_id, baseline=metrics, evaluation_waiting_for=None, **_evaluation_settings(run))
    registry.end_phase(run_id, "baseline")
    return {"done": True}


def evaluate(runtime: Runtime, event: Event) -> dict[str, Any]:
    """One evaluation step. ``done`` False: the evaluation job is still running; the state machine waits
    ``evaluation_poll_seconds`` and calls again, until ``evaluation_max_wait_minutes``."""
    run_id = run_id_of(event)
    registry = runtime.registry
    record = registry.set_status(run_id, RunStatus.EVALUATING, phase="evaluate")
    runtime.slots.renew(run_id)
    run = RunView(runtime, record)
    adapter = run.adapter
    evaluator = getattr(adapter, "evaluate", None)
    if not callable(evaluator):
        registry.end_phase(run_id, "evaluate", "skipped", reason=f"backend '{adapter.name}' has no evaluator")
        return {"done": True, "evaluated": False}
    metrics = _evaluation_step(run, "evaluate", "evaluation", lambda: evaluator(run.context))
    if metrics is None:
        return {"done": False, "evaluated": False}
    fields: dict[str, Any] = {"evaluation": metrics, "evaluation_waiting_for": None}
    fields.update(_evaluation_settings(run))
    registry.set_fields(run_id, **fields)
    registry.end_phase(run_id, "evaluate")
    return {"done": True, "evaluated": True}
