"""Teardown: cancel the job if it may still run, remove every recorded resource, free the slot."""

from __future__ import annotations

from typing import Any

from mtrl.contracts.backend import JobState
from mtrl.contracts.errors import ConfigurationError, InternalError, TeardownIncomplete
from mtrl.runs.phases.context import Event, run_id_of
from mtrl.runs.phases.run_view import RunView
from mtrl.runs.registry import RunStatus
from mtrl.runs.runtime import Runtime


def teardown(runtime: Runtime, event: Event) -> dict[str, Any]:
    """Cancel the job if it may still run, remove every recorded resource, free the slot. Idempotent."""
    run_id = run_id_of(event)
    registry = runtime.registry
    record = registry.find(run_id)
    if record is None:
        runtime.slots.release(run_id)
        return {"removed": 0}
    registry.set_status(run_id, RunStatus.TEARING_DOWN, phase="teardown")
    # A cancelled or failed run's phase (train, say) ends here: `mtrl status` must not count it on after teardown.
    record = registry.end_open_phases(run_id, "stopped", but="teardown")
    problems: list[str] = []
    removed = 0
    # A run that created nothing and started no job never reached its backend: nothing to clean up.
    if record.get("settings") and (record["resources"] or record.get("job_id")):
        run = RunView(runtime, record)
        try:
            adapter, context = run.adapter, run.context
        except (ConfigurationError, InternalError) as error:  # no backend, or no stored inputs to give it
            adapter = None
            problems.append(str(error))
        if adapter is not None:
            job_id = record.get("job_id")
            if job_id and record.get("job_state") not in {state.value for state in JobState if state.terminal}:
                try:
                    adapter.cancel(context, job_id)
                    registry.set_fields(run_id, job_state=JobState.STOPPED.value, job_message="cancelled by teardown")
                except Exception as error:
                    problems.append(f"cancelling job {job_id}: {error}")
                # Cancelling may itself record resources (the hyperpod runner's cancel task): clean those up too.
                context = run.updated(registry.get(run_id)).context
            if not problems:
                try:
                    adapter.cleanup(context)
                    registry.mark_removed(run_id, list(context.resources))
                    removed = len(context.resources)
                except Exception as error:
                    problems.append(f"cleanup: {error}")
    if problems:
        registry.end_phase(run_id, "teardown", "incomplete", problems=problems)
        raise TeardownIncomplete(f"run {run_id}: " + "; ".join(problems))
    runtime.slots.release(run_id)
    registry.end_phase(run_id, "teardown", removed=removed)
    return {"removed": removed}
