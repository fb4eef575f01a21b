"""AcquireSlot: one of ``max_concurrent_runs`` training slots, first come first served, or the place in line."""

from __future__ import annotations

from typing import Any

from mtrl.contracts.errors import SlotWaitTimedOut
from mtrl.runs.phases.context import Event, parse_time, run_id_of
from mtrl.runs.runtime import Runtime


def acquire_slot(runtime: Runtime, event: Event) -> dict[str, Any]:
    run_id = run_id_of(event)
    registry = runtime.registry
    record = registry.get(run_id)
    started = record["phases"]["slot"]["started_at"]  # Register starts the slot phase
    waited = runtime.clock() - parse_time(started).timestamp()
    try:
        acquisition = runtime.slots.try_acquire(run_id)
    except LookupError:
        # The ticket vanished (e.g. swept as stale after a long stall): take a new place in line.
        runtime.slots.enqueue(run_id, arrival=str(record["dataset"].get("uploaded_at") or record["created_at"]))
        acquisition = runtime.slots.try_acquire(run_id)
    if acquisition.acquired:
        registry.set_fields(run_id, slot=acquisition.slot, queue_position=None)
        registry.end_phase(run_id, "slot", waited_seconds=round(max(waited, 0.0), 3))
        return {"acquired": True, "slot": acquisition.slot}
    if waited > runtime.settings.slot_max_wait_minutes * 60:
        raise SlotWaitTimedOut(
            f"run {run_id}: no training slot became free in {runtime.settings.slot_max_wait_minutes} minutes "
            f"(still {acquisition.runs_ahead} run(s) ahead; max_concurrent_runs={runtime.settings.max_concurrent_runs})"
        )
    # The runs ahead include those holding the slots: "0 run(s) ahead" while another run trains read as a bug.
    registry.set_fields(run_id, queue_position=acquisition.runs_ahead)
    return {"acquired": False, "position": acquisition.position}
