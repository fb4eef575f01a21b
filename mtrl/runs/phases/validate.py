"""Validate: stream the dataset (and any separate evaluation set) through the validator, write
``runs/<run id>/validation.json`` and, for ``eval_split``, the split files; fail fast if anything is invalid.

What the validator reads is copied, in the same read, under the run's own prefix (``validated_keys``), and every
backend is given those copies (or the split files written from them), never the uploaded keys: a later upload over
``training-data/<name>`` or the ``eval_dataset`` key cannot change what a run trains or evaluates on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from mtrl.contracts.errors import ConfigurationError, DatasetInvalid, InternalError
from mtrl.runs.manifest import RunSettings
from mtrl.runs.phases.context import Event, put_json, run_id_of
from mtrl.runs.phases.inputs import INPUTS_FIELD, data_inputs, validated_keys
from mtrl.runs.phases.run_view import RunView
from mtrl.runs.registry import RunStatus, raise_for_client_error
from mtrl.runs.runtime import Runtime
from mtrl.validation.dataset import DatasetValidator, Limits, ValidationReport
from mtrl.validation.sources import UnknownEnvironmentError, environment_check, validate_s3_object
from mtrl.validation.splits import SplitFiles, SplitSourceError, write_eval_split


def validate(runtime: Runtime, event: Event) -> dict[str, Any]:
    run_id = run_id_of(event)
    registry = runtime.registry
    record = registry.set_status(run_id, RunStatus.VALIDATING, phase="validate")
    runtime.slots.renew(run_id)
    settings = RunView(runtime, record).settings
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
                limits=limits,
                task_check=check,
                environment=settings.environment,
                index_tasks=True,
                measure_prompts=True,
            )
            eval_report = validate_s3_object(
                runtime.s3,
                bucket=runtime.bucket,
                key=settings.eval_dataset,
                version_id=None,
                validator=holdout,
                copy_to=(runtime.bucket, validated_keys(run_id)[1]),
            )
        validator = DatasetValidator(
            limits=limits,
            task_check=check,
            environment=settings.environment,
            eval_split=settings.eval_split,
            holdout=holdout,
            measure_prompts=True,  # the backend's Preflight compares them with the run's prompt length
        )
        report = validate_s3_object(
            runtime.s3,
            bucket=dataset["bucket"],
            key=dataset["key"],
            version_id=dataset.get("version_id"),
            validator=validator,
            copy_to=(runtime.bucket, validated_keys(run_id)[0]),
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
    put_json(runtime, report_key, document, run_id)
    report_uri = f"s3://{runtime.bucket}/{report_key}"
    # The data URIs, resolved once here (only for a valid dataset); every later phase reads them (phases.inputs).
    inputs = (
        data_inputs(runtime, run_id, settings=settings, dataset=dataset, splits=splits.to_dict() if splits else None)
        if valid
        else None
    )
    registry.set_fields(
        run_id,
        **({INPUTS_FIELD: inputs.to_record()} if inputs else {}),
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
    """Materialise ``eval_split`` from the validated copy: the backends get the training rows only and the held-out
    rows as their evaluation set (a separate ``eval_dataset`` is used as validated)."""
    if settings.eval_split <= 0 or settings.eval_dataset:
        return None
    train_key, eval_key = split_keys(run_id)
    try:
        splits = write_eval_split(
            runtime.s3,
            bucket=runtime.bucket,
            key=validated_keys(run_id)[0],
            version_id=None,  # the run's own copy: written once, by this phase
            eval_split=settings.eval_split,
            out_bucket=runtime.bucket,
            train_key=train_key,
            eval_key=eval_key,
            max_line_bytes=limits.max_line_bytes,
        )
    except SplitSourceError as error:
        raise InternalError(
            f"run {run_id}: splitting the validated copy of s3://{dataset['bucket']}/{dataset['key']}: {error}"
        ) from None
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
