"""The pipeline phases the state machine calls, one function each: ``phase(runtime, event) -> result``.

Events come from ``statemachine/pipeline.asl.json``: ``{"action", "run_id", "execution_arn", "state"}``
where ``state`` is the execution's state (the trigger input plus what earlier phases added). Every phase
is idempotent (Step Functions may retry it), and every error message names the run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from mtrl.backends.base import BackendAdapter, BackendError, CreatedResource, JobState, RunContext
from mtrl.health.rules import INCOMPLETE, STOP, stop_rules
from mtrl.runs.adapters import adapter_for
from mtrl.runs.backend_options import baseline_support, effective_settings
from mtrl.runs.errors import (
    BackendFailed,
    BudgetExceeded,
    ConfigurationError,
    DatasetInvalid,
    EarlyStopped,
    InternalError,
    JobFailed,
    PipelineError,
    PreflightFailed,
    RunTimedOut,
    SlotWaitTimedOut,
    TeardownIncomplete,
    TransientError,
    in_plain_words,
)
from mtrl.runs.health_poll import kept_checkpoints, poll_health
from mtrl.runs.manifest import RunSettings, parse_manifest, resolve_run_settings
from mtrl.runs.registry import RunStatus, raise_for_client_error
from mtrl.runs.report import build_summary, cause_text, notification, notification_choice
from mtrl.runs.runtime import Runtime
from mtrl.validation import (
    DatasetValidator,
    Limits,
    UnknownEnvironmentError,
    ValidationReport,
    environment_check,
    validate_s3_object,
)
from mtrl.validation.splits import SplitFiles, SplitSourceError, write_eval_split

Event = Mapping[str, Any]
Phase = Callable[[Runtime, Event], dict[str, Any]]


def _run_id(event: Event) -> str:
    run_id = event.get("run_id")
    if not isinstance(run_id, str) or not run_id:
        raise InternalError(f"event has no run_id: {json.dumps(event, default=str)[:300]}")
    return run_id


def _state(event: Event) -> dict[str, Any]:
    return dict(event.get("state") or {})


def _parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _run_settings(record: Mapping[str, Any]) -> RunSettings:
    if not record.get("settings"):
        raise ConfigurationError(f"run {record['run_id']} has no valid settings")
    return RunSettings.model_validate(record["settings"])


def run_context(runtime: Runtime, record: Mapping[str, Any]) -> RunContext:
    """What the backend adapter sees: deploy-time backend settings, the run's own settings and its per-run
    backend options, which can never replace a deploy-time value (mtrl.runs.backend_options)."""
    run_id = record["run_id"]
    settings = _run_settings(record)
    dataset = record["dataset"]
    try:
        merged = effective_settings(
            runtime.backend_settings,
            {
                **settings.model_dump(mode="json", exclude={"backend_options"}),
                "run_id": run_id,
                "dataset_version_id": dataset.get("version_id"),
            },
            backend=settings.backend,
            options=settings.backend_options,
        )
    except ConfigurationError as error:
        raise ConfigurationError(f"run {run_id}: {error}") from None
    resources = tuple(
        CreatedResource(kind=r["kind"], identifier=r["identifier"], details=r.get("details") or {})
        for r in record.get("resources") or []
        if "removed_at" not in r
    )
    splits = (record.get("validation") or {}).get("splits")
    if splits:  # eval_split: train on the training split only, evaluate on the held-out rows
        dataset_uri, eval_dataset_uri = splits["train_uri"], splits["eval_uri"]
    else:
        dataset_uri = f"s3://{dataset['bucket']}/{dataset['key']}"
        eval_dataset_uri = f"s3://{runtime.bucket}/{settings.eval_dataset}" if settings.eval_dataset else None
    return RunContext(
        run_id=run_id,
        settings=merged,
        dataset_uri=dataset_uri,
        eval_dataset_uri=eval_dataset_uri,
        output_uri=f"s3://{runtime.bucket}/runs/{run_id}/",
        resources=resources,
        record_resource=lambda resource: runtime.registry.record_resource(run_id, resource),
    )


def _adapter(record: Mapping[str, Any]) -> BackendAdapter:
    return adapter_for(_run_settings(record).backend)


def _backend_call(run_id: str, what: str, call: Callable[[], Any]) -> Any:
    """Call the adapter, mapping its errors onto the pipeline's (transient ones are retried)."""
    try:
        return call()
    except PipelineError:
        raise
    except BackendError as error:
        if error.transient:
            raise TransientError(f"run {run_id}: {what}: {error}") from error
        raise BackendFailed(f"run {run_id}: {what}: {error}") from error


# -- register → acquire slot --------------------------------------------------------------------------
def register(runtime: Runtime, event: Event) -> dict[str, Any]:
    run_id = _run_id(event)
    state = _state(event)
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
        return _registration(runtime, duplicate=True, evaluate=False, baseline=False)
    registry.set_status(run_id, RunStatus.REGISTERED, phase="register")
    source = (state.get("manifest_ref") or {}).get("uri", "manifest")
    if state.get("manifest_error"):
        raise ConfigurationError(f"run {run_id}: {state['manifest_error']}")
    try:
        manifest = parse_manifest(state["manifest_text"], source=source) if state.get("manifest_text") else None
        settings = resolve_run_settings(runtime.settings, manifest, source=source)
    except ConfigurationError as error:
        raise ConfigurationError(f"run {run_id}: {error}") from None
    registry.set_fields(run_id, settings=settings.model_dump(mode="json"))
    runtime.slots.enqueue(run_id, arrival=str(state.get("created_at") or record["created_at"]))
    registry.end_phase(run_id, "register")
    registry.set_status(run_id, RunStatus.WAITING_FOR_SLOT, phase="slot")
    return _registration(
        runtime, duplicate=False, evaluate=settings.evaluate, baseline=_baseline_phase_wanted(settings)
    )


def _registration(runtime: Runtime, *, duplicate: bool, evaluate: bool, baseline: bool) -> dict[str, Any]:
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


def _baseline_phase_wanted(settings: RunSettings) -> bool:
    """The Baseline phase runs before Submit when the run asks for a baseline its backend measures in a phase."""
    support = baseline_support(settings.backend)
    return settings.baseline_evaluation and support is not None and support.phase


def acquire_slot(runtime: Runtime, event: Event) -> dict[str, Any]:
    run_id = _run_id(event)
    registry = runtime.registry
    record = registry.get(run_id)
    started = record["phases"].get("slot", {}).get("started_at") or record["created_at"]
    waited = runtime.clock() - _parse_time(started).timestamp()
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
            f"(still {acquisition.position} run(s) ahead; max_concurrent_runs={runtime.settings.max_concurrent_runs})"
        )
    registry.set_fields(run_id, queue_position=acquisition.position)
    return {"acquired": False, "position": acquisition.position}


# -- validate ---------------------------------------------------------------------------------------------
def validate(runtime: Runtime, event: Event) -> dict[str, Any]:
    run_id = _run_id(event)
    registry = runtime.registry
    record = registry.set_status(run_id, RunStatus.VALIDATING, phase="validate")
    runtime.slots.renew(run_id)
    settings = _run_settings(record)
    dataset = record["dataset"]
    limits = Limits.from_settings(runtime.settings, max_errors=runtime.settings.validation_max_errors)
    try:
        check = environment_check(settings.environment)
    except UnknownEnvironmentError as error:
        raise ConfigurationError(f"run {run_id}: {error}") from None
    eval_report: ValidationReport | None = None
    holdout = None
    try:
        if settings.eval_dataset:
            holdout = DatasetValidator(
                limits=limits, task_check=check, environment=settings.environment, index_tasks=True
            )
            eval_report = validate_s3_object(
                runtime.s3, bucket=runtime.bucket, key=settings.eval_dataset, version_id=None, validator=holdout
            )
        validator = DatasetValidator(
            limits=limits,
            task_check=check,
            environment=settings.environment,
            eval_split=settings.eval_split,
            holdout=holdout,
        )
        report = validate_s3_object(
            runtime.s3,
            bucket=dataset["bucket"],
            key=dataset["key"],
            version_id=dataset.get("version_id"),
            validator=validator,
        )
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        if code in {"NoSuchKey", "NoSuchVersion", "404"}:
            missing = settings.eval_dataset if eval_report is None and settings.eval_dataset else dataset["key"]
            raise DatasetInvalid(f"run {run_id}: s3://{runtime.bucket}/{missing} does not exist") from None
        raise_for_client_error(error, f"run {run_id}: reading the dataset")
        raise
    valid = report.valid and (eval_report is None or eval_report.valid)
    if not dataset["key"].endswith(".jsonl"):
        valid = False
        report.add(None, "extension", f"the dataset key must end in .jsonl (got {dataset['key']!r})")
    # Only a valid dataset is split (an invalid one writes nothing but its report).
    splits = (
        _write_splits(runtime, run_id, dataset=dataset, settings=settings, report=report, limits=limits)
        if valid
        else None
    )
    report_key = f"runs/{run_id}/validation.json"
    document = {
        "run_id": run_id,
        "valid": valid,
        "dataset": dataset,
        "environment": settings.environment,
        "eval_split": settings.eval_split,
        "train": report.to_dict(),
        "eval": eval_report.to_dict() if eval_report else None,
        "splits": splits.to_dict() if splits else None,
    }
    _put_json(runtime, report_key, document, run_id)
    report_uri = f"s3://{runtime.bucket}/{report_key}"
    registry.set_fields(
        run_id,
        validation={
            "valid": valid,
            "rows": report.rows,
            "eval_rows": report.eval_rows if eval_report is None else eval_report.rows,
            "error_count": report.error_count + (eval_report.error_count if eval_report else 0),
            "report_uri": report_uri,
            **({"splits": splits.to_dict()} if splits else {}),
        },
    )
    registry.end_phase(run_id, "validate", "ok" if valid else "invalid")
    if not valid:
        failing = eval_report if eval_report is not None and not eval_report.valid else report
        first = "; ".join(issue.render() for issue in failing.errors[:3])
        raise DatasetInvalid(
            f"run {run_id}: {failing.source} has {failing.error_count} error(s): {first}"
            + (" …" if failing.error_count > 3 else "")
            + f" (full report: {report_uri})"
        )
    return {"valid": True, "rows": report.rows, "eval_rows": report.eval_rows}


def split_keys(run_id: str) -> tuple[str, str]:
    """Where an ``eval_split`` run's training and evaluation rows are written (under the run's own prefix)."""
    return f"runs/{run_id}/data/train.jsonl", f"runs/{run_id}/data/eval.jsonl"


def _write_splits(
    runtime: Runtime,
    run_id: str,
    *,
    dataset: Mapping[str, Any],
    settings: RunSettings,
    report: ValidationReport,
    limits: Limits,
) -> SplitFiles | None:
    """Materialise ``eval_split``: the backends get the training rows only and the held-out rows as their
    evaluation set (a separate ``eval_dataset`` is used as uploaded)."""
    if settings.eval_split <= 0 or settings.eval_dataset:
        return None
    train_key, eval_key = split_keys(run_id)
    try:
        splits = write_eval_split(
            runtime.s3,
            bucket=dataset["bucket"],
            key=dataset["key"],
            version_id=dataset.get("version_id"),
            eval_split=settings.eval_split,
            out_bucket=runtime.bucket,
            train_key=train_key,
            eval_key=eval_key,
            max_line_bytes=limits.max_line_bytes,
        )
    except SplitSourceError as error:
        raise InternalError(f"run {run_id}: splitting s3://{dataset['bucket']}/{dataset['key']}: {error}") from None
    except ClientError as error:
        raise_for_client_error(error, f"run {run_id}: writing the eval_split files under runs/{run_id}/data/")
        raise
    if (splits.train_rows + splits.eval_rows, splits.eval_rows) != (report.rows, report.eval_rows):
        raise InternalError(
            f"run {run_id}: the split files hold {splits.train_rows} training and {splits.eval_rows} evaluation "
            f"rows but validation counted {report.rows - report.eval_rows} and {report.eval_rows} "
            "(the dataset changed between the two reads?)"
        )
    return splits


def _put_json(runtime: Runtime, key: str, document: Any, run_id: str) -> None:
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


# -- backend phases -----------------------------------------------------------------------------------
def preflight(runtime: Runtime, event: Event) -> dict[str, Any]:
    run_id = _run_id(event)
    registry = runtime.registry
    record = registry.set_status(run_id, RunStatus.PREFLIGHT, phase="preflight")
    runtime.slots.renew(run_id)
    settings = _run_settings(record)
    if settings.eval_split > 0 and not settings.eval_dataset and not (record.get("validation") or {}).get("splits"):
        # Never fall back to the whole upload: the backend would train on the rows held out for evaluation.
        raise InternalError(f"run {run_id}: eval_split={settings.eval_split} but validation wrote no split files")
    adapter = _adapter(record)
    findings = _backend_call(run_id, "preflight", lambda: adapter.preflight(run_context(runtime, record)))
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
    run_id = _run_id(event)
    registry = runtime.registry
    record = registry.set_status(run_id, RunStatus.PROVISIONING, phase="provision")
    runtime.slots.renew(run_id)
    adapter = _adapter(record)
    try:
        created = adapter.provision(run_context(runtime, record))
    except PipelineError:
        raise
    except BackendError as error:
        if not error.transient:
            raise BackendFailed(f"run {run_id}: provision: {error}") from error
        # A scale-up takes many minutes: wait in the state machine (bounded), not in a giant Retry.
        started = _parse_time(registry.get(run_id)["phases"]["provision"]["started_at"]).timestamp()
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


def submit(runtime: Runtime, event: Event) -> dict[str, Any]:
    run_id = _run_id(event)
    registry = runtime.registry
    record = registry.set_status(run_id, RunStatus.SUBMITTING, phase="submit")
    if record.get("job_id"):  # a retried submit must never start a second job
        registry.end_phase(run_id, "submit", job_id=record["job_id"])
        registry.set_status(run_id, RunStatus.TRAINING, phase="train")
        return {"job_id": record["job_id"]}
    runtime.slots.renew(run_id)
    adapter = _adapter(record)
    job_id = _backend_call(run_id, "submit", lambda: adapter.submit(run_context(runtime, record)))
    settings = _run_settings(record)
    now = runtime.clock()
    deadline = datetime.fromtimestamp(now + settings.run_timeout_minutes * 60, UTC)
    registry.set_fields(
        run_id, job_id=job_id, job_state=JobState.PENDING.value, deadline=deadline.isoformat().replace("+00:00", "Z")
    )
    registry.end_phase(run_id, "submit", job_id=job_id)
    registry.set_status(run_id, RunStatus.TRAINING, phase="train")
    return {"job_id": job_id}


def check_status(runtime: Runtime, event: Event) -> dict[str, Any]:
    run_id = _run_id(event)
    registry = runtime.registry
    record = registry.get(run_id)
    job_id = record.get("job_id")
    if not job_id:
        raise InternalError(f"run {run_id}: no job was submitted")
    runtime.slots.renew(run_id)
    adapter = _adapter(record)
    status = _backend_call(run_id, "job status", lambda: adapter.status(run_context(runtime, record), job_id))
    cost = {"usd": status.metrics["cost_usd"]} if "cost_usd" in status.metrics else record.get("cost")
    registry.set_fields(
        run_id,
        job_state=status.state.value,
        job_message=status.message,
        progress=dict(status.progress),
        metrics={k: v for k, v in status.metrics.items() if k != "cost_usd"} or record.get("metrics"),
        outputs=dict(status.outputs) or record.get("outputs"),
        cost=cost,
        last_polled_at=datetime.fromtimestamp(runtime.clock(), UTC).isoformat().replace("+00:00", "Z"),
    )
    health = poll_health(runtime, run_id, record, ended=status.state.terminal)
    if health is not None and not status.state.terminal:
        _early_stop(runtime, record, adapter, job_id, health)
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
    settings = _run_settings(record)
    if runtime.clock() > _parse_time(record["deadline"]).timestamp():
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


def _early_stop(
    runtime: Runtime, record: Mapping[str, Any], adapter: BackendAdapter, job_id: str, health: Mapping[str, Any]
) -> None:
    """``early_stop``: a rule at its stop level cancels the job through its backend (which keeps its latest
    state); the run then ends STOPPED with ``stop_reason`` naming the rule."""
    run_id = record["run_id"]
    wanted = _run_settings(record).early_stop
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
    _backend_call(
        run_id, "cancelling the job (early_stop)", lambda: adapter.cancel(run_context(runtime, record), job_id)
    )
    kept = kept_checkpoints(adapter, lambda: run_context(runtime, record))
    runtime.registry.set_fields(
        run_id,
        job_state=JobState.STOPPED.value,
        job_message=reason,
        stop_reason=reason,
        stop_rule=fired["rule"],
        stop_checkpoints=kept,
    )
    runtime.registry.end_phase(run_id, "train", "stopped")
    raise EarlyStopped(f"run {run_id}: {reason}")


def _evaluation_step(
    runtime: Runtime, run_id: str, phase: str, what: str, call: Callable[[], Mapping[str, float]]
) -> dict[str, float] | None:
    """One step of an evaluation wait loop: the metrics, or None while the evaluation job still runs (a transient
    BackendError), bounded by ``evaluation_max_wait_minutes`` from the phase's start."""
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
        started = _parse_time(registry.get(run_id)["phases"][phase]["started_at"]).timestamp()
        limit = runtime.settings.evaluation_max_wait_minutes
        if runtime.clock() - started > limit * 60:
            registry.end_phase(run_id, phase, "timed out", waiting_for=str(error))
            raise BackendFailed(
                f"run {run_id}: the {what} did not finish within {limit} minutes (evaluation_max_wait_minutes); "
                f"last state: {error}"
            ) from error
        registry.set_fields(run_id, evaluation_waiting_for=str(error))
        return None


def _evaluation_settings(runtime: Runtime, adapter: BackendAdapter, record: Mapping[str, Any]) -> dict[str, Any]:
    """What was scored (sampling settings, the evaluation measure), so the summary's metrics can be read correctly."""
    described = getattr(adapter, "evaluation_settings", None)
    if not callable(described):
        return {}
    return {
        "evaluation_settings": _backend_call(
            record["run_id"], "evaluation settings", lambda: described(run_context(runtime, record))
        )
    }


def baseline(runtime: Runtime, event: Event) -> dict[str, Any]:
    """One step of the baseline evaluation before training (the base model on the held-out split; the run asked
    for it with ``baseline_evaluation``). ``done`` False: the job still runs; the state machine waits
    ``evaluation_poll_seconds`` and calls again, until ``evaluation_max_wait_minutes``."""
    run_id = _run_id(event)
    registry = runtime.registry
    record = registry.set_status(run_id, RunStatus.EVALUATING_BASELINE, phase="baseline")
    runtime.slots.renew(run_id)
    adapter = _adapter(record)
    measure = getattr(adapter, "baseline", None)
    if not callable(measure):  # manifest validation refuses this; a record from elsewhere must not pass silently
        registry.end_phase(run_id, "baseline", "failed")
        raise ConfigurationError(f"run {run_id}: backend '{adapter.name}' cannot evaluate a baseline before training")
    metrics = _evaluation_step(
        runtime, run_id, "baseline", "baseline evaluation", lambda: measure(run_context(runtime, record))
    )
    if metrics is None:
        return {"done": False}
    registry.set_fields(
        run_id, baseline=metrics, evaluation_waiting_for=None, **_evaluation_settings(runtime, adapter, record)
    )
    registry.end_phase(run_id, "baseline")
    return {"done": True}


def evaluate(runtime: Runtime, event: Event) -> dict[str, Any]:
    """One evaluation step. ``done`` False: the evaluation job is still running; the state machine waits
    ``evaluation_poll_seconds`` and calls again, until ``evaluation_max_wait_minutes``."""
    run_id = _run_id(event)
    registry = runtime.registry
    record = registry.set_status(run_id, RunStatus.EVALUATING, phase="evaluate")
    runtime.slots.renew(run_id)
    adapter = _adapter(record)
    evaluator = getattr(adapter, "evaluate", None)
    if not callable(evaluator):
        registry.end_phase(run_id, "evaluate", "skipped", reason=f"backend '{adapter.name}' has no evaluator")
        return {"done": True, "evaluated": False}
    metrics = _evaluation_step(
        runtime, run_id, "evaluate", "evaluation", lambda: evaluator(run_context(runtime, record))
    )
    if metrics is None:
        return {"done": False, "evaluated": False}
    fields: dict[str, Any] = {"evaluation": metrics, "evaluation_waiting_for": None}
    fields.update(_evaluation_settings(runtime, adapter, record))
    registry.set_fields(run_id, **fields)
    registry.end_phase(run_id, "evaluate")
    return {"done": True, "evaluated": True}


# -- teardown → report ------------------------------------------------------------------------------------
def teardown(runtime: Runtime, event: Event) -> dict[str, Any]:
    """Cancel the job if it may still run, remove every recorded resource, free the slot. Idempotent."""
    run_id = _run_id(event)
    registry = runtime.registry
    record = registry.find(run_id)
    if record is None:
        runtime.slots.release(run_id)
        return {"removed": 0}
    record = registry.set_status(run_id, RunStatus.TEARING_DOWN, phase="teardown")
    problems: list[str] = []
    removed = 0
    # A run that created nothing and started no job never reached its backend: nothing to clean up.
    if record.get("settings") and (record.get("resources") or record.get("job_id")):
        try:
            adapter = _adapter(record)
        except ConfigurationError as error:
            adapter = None
            if record.get("resources") or record.get("job_id"):
                problems.append(str(error))
        if adapter is not None:
            context = run_context(runtime, record)
            job_id = record.get("job_id")
            if job_id and record.get("job_state") not in {state.value for state in JobState if state.terminal}:
                try:
                    adapter.cancel(context, job_id)
                    registry.set_fields(run_id, job_state=JobState.STOPPED.value, job_message="cancelled by teardown")
                except Exception as error:
                    problems.append(f"cancelling job {job_id}: {error}")
                # Cancelling may itself record resources (the hyperpod runner's cancel task): clean those up too.
                context = run_context(runtime, registry.get(run_id))
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
    run_id = _run_id(event)
    state = _state(event)
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
    _put_json(runtime, f"runs/{run_id}/summary.json", summary, run_id)
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


# -- executions that ended without reaching report (aborted, machine timeout, unexpected failure) ---------
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
    open_phases = [name for name, entry in (record.get("phases") or {}).items() if "ended_at" not in entry]
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

BACKEND_ACTIONS: dict[str, Phase] = {
    "preflight": preflight,
    "provision": provision,
    "submit": submit,
    "status": check_status,
    "baseline": baseline,
    "evaluate": evaluate,
    "teardown": teardown,
}
