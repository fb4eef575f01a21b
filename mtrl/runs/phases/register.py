"""Register: the run record, the manifest's settings resolved within the deployment's limits, a place in line."""

from __future__ import annotations

from typing import Any

from mtrl.contracts.errors import ConfigurationError
from mtrl.contracts.run_options import baseline_support
from mtrl.runs.manifest import RunSettings, resolve_run_settings
from mtrl.runs.phases.context import Event, run_id_of, state_of
from mtrl.runs.registry import RunStatus
from mtrl.runs.runtime import Runtime


def register(runtime: Runtime, event: Event) -> dict[str, Any]:
    run_id = run_id_of(event)
    state = state_of(event)
    registry = runtime.registry
    dataset = {
        "bucket": state["bucket"],
        "key": state["key"],
        "version_id": state.get("version_id"),
        "size": state.get("size"),
        "uri": f"s3://{state['bucket']}/{state['key']}",
        "uploaded_at": state.get("created_at"),
    }
    record, created = registry.create(
        run_id,
        {"execution_arn": event.get("execution_arn"), "dataset": dataset, "manifest": state.get("manifest_ref")},
    )
    if not created and record.get("execution_arn") != event.get("execution_arn"):
        # Another execution already owns this run id (a duplicate delivery that got past the name check).
        # Every key the state machine's ResultSelector reads must be present: Step Functions fails a state whose
        # selector path is missing (States.Runtime), and this execution's Catch would then tear down the other's run.
        return registration(runtime, duplicate=True, evaluate=False, baseline=False)
    registry.set_status(run_id, RunStatus.REGISTERED, phase="register")
    source = (state.get("manifest_ref") or {}).get("uri", "manifest")
    if state.get("manifest_error"):
        raise ConfigurationError(f"run {run_id}: {state['manifest_error']}")
    try:
        manifest = _manifest_document(state, source=source)
        settings = resolve_run_settings(runtime.settings, manifest, source=source)
    except ConfigurationError as error:
        raise ConfigurationError(f"run {run_id}: {error}") from None
    registry.set_fields(run_id, settings=settings.model_dump(mode="json"))
    runtime.slots.enqueue(run_id, arrival=str(state.get("created_at") or record["created_at"]))
    registry.end_phase(run_id, "register")
    registry.set_status(run_id, RunStatus.WAITING_FOR_SLOT, phase="slot")
    return registration(runtime, duplicate=False, evaluate=settings.evaluate, baseline=baseline_phase_wanted(settings))


def _manifest_document(state: dict[str, Any], *, source: str) -> dict[str, Any] | None:
    """The manifest the trigger parsed (``manifest``), never parsed again; None when the upload has none."""
    if "manifest" not in state:
        return None
    document = state["manifest"]
    if not isinstance(document, dict):
        raise ConfigurationError(f"manifest {source} must be a JSON object of settings")
    return document


def registration(runtime: Runtime, *, duplicate: bool, evaluate: bool, baseline: bool) -> dict[str, Any]:
    """Register's answer, one shape for both outcomes (the ASL's Register ResultSelector reads each key)."""
    return {
        "duplicate": duplicate,
        "slot_poll_seconds": runtime.settings.slot_poll_seconds,
        "status_poll_seconds": runtime.settings.status_poll_seconds,
        "provision_poll_seconds": runtime.settings.provision_poll_seconds,
        "evaluation_poll_seconds": runtime.settings.evaluation_poll_seconds,
        "evaluate": evaluate,
        "baseline": baseline,
    }


def baseline_phase_wanted(settings: RunSettings) -> bool:
    """The Baseline phase runs before Submit when the run asks for a baseline its backend measures in a phase."""
    support = baseline_support(settings.backend)
    return settings.baseline_evaluation and support is not None and support.phase
