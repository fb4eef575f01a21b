"""What the backend adapter sees of a run (``RunContext``): its inputs and its recorded resources."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mtrl.backends.base import CreatedResource, RunContext
from mtrl.runs.backend_options import effective_settings
from mtrl.runs.errors import ConfigurationError
from mtrl.runs.phases.context import run_settings
from mtrl.runs.runtime import Runtime


def run_context(runtime: Runtime, record: Mapping[str, Any]) -> RunContext:
    """What the backend adapter sees: deploy-time backend settings, the run's own settings and its per-run
    backend options, which can never replace a deploy-time value (mtrl.runs.backend_options)."""
    run_id = record["run_id"]
    settings = run_settings(record)
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
