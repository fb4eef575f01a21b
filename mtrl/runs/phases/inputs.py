"""A run's resolved inputs (what the backend adapter sees of the run, ``run_view.RunView.context``, is built from them).

Each input is resolved once and stored on the run record (``inputs``), by the first phase that can know it:
Validate the data URIs (the dataset, or the ``eval_split`` files it wrote; the evaluation set; the output prefix),
Preflight — the first phase in the one function that holds the deploy-time backend settings — the effective
settings (deploy-time backend settings ∪ the run's settings ∪ its per-run options). Every later phase reads them:
nothing re-merges the settings or re-derives a URI from the upload, so every phase gives the adapter the same view.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mtrl.contracts.descriptor import resolve
from mtrl.contracts.errors import ConfigurationError, InternalError
from mtrl.contracts.registry import descriptor_for
from mtrl.runs.manifest import RunSettings, effective_run_settings
from mtrl.runs.runtime import Runtime

INPUTS_FIELD = "inputs"  # the run record's field


@dataclass(frozen=True)
class ResolvedInputs:
    """What a run trains and evaluates on, where it writes, and (from Preflight on) the settings its adapter gets."""

    dataset_uri: str
    eval_dataset_uri: str | None
    output_uri: str
    settings: Mapping[str, Any] | None = None

    def to_record(self) -> dict[str, Any]:
        stored: dict[str, Any] = {
            "dataset_uri": self.dataset_uri,
            "eval_dataset_uri": self.eval_dataset_uri,
            "output_uri": self.output_uri,
        }
        if self.settings is not None:
            # JSON text, not a map: DynamoDB has one number type, so a map would give back 1.0 as 1.
            stored["settings_json"] = json.dumps(self.settings)  # in the merge's order
        return stored

    @classmethod
    def from_record(cls, run_id: str, stored: Mapping[str, Any]) -> ResolvedInputs:
        try:
            settings = json.loads(stored["settings_json"]) if "settings_json" in stored else None
            if settings is not None and not isinstance(settings, dict):
                raise TypeError(f"settings_json holds a {type(settings).__name__}, not an object")
            return cls(
                dataset_uri=str(stored["dataset_uri"]),
                eval_dataset_uri=stored.get("eval_dataset_uri"),
                output_uri=str(stored["output_uri"]),
                settings=settings,
            )
        except (KeyError, TypeError, ValueError) as error:
            raise InternalError(f"run {run_id}: the record's resolved inputs are unreadable: {error!r}") from None


def validated_keys(run_id: str) -> tuple[str, str]:
    """Where Validate copies the bytes it validated of a run's dataset and of its separate evaluation set (the run's
    own prefix, which only the pipeline writes)."""
    return f"runs/{run_id}/data/dataset.jsonl", f"runs/{run_id}/data/eval-dataset.jsonl"


def data_inputs(
    runtime: Runtime,
    run_id: str,
    *,
    settings: RunSettings,
    dataset: Mapping[str, Any],
    splits: Mapping[str, Any] | None,
) -> ResolvedInputs:
    """The data URIs (Validate): the copies of exactly what was validated, under the run's own prefix (never the
    uploaded keys, which a later upload may overwrite). ``splits``: the ``eval_split`` files Validate wrote, if any."""
    eval_dataset_uri: str | None
    if splits:  # eval_split: train on the training split only, evaluate on the held-out rows
        dataset_uri, eval_dataset_uri = str(splits["train_uri"]), str(splits["eval_uri"])
    else:
        dataset_key, eval_key = validated_keys(run_id)
        dataset_uri = f"s3://{runtime.bucket}/{dataset_key}"
        eval_dataset_uri = f"s3://{runtime.bucket}/{eval_key}" if settings.eval_dataset else None
    return ResolvedInputs(
        dataset_uri=dataset_uri, eval_dataset_uri=eval_dataset_uri, output_uri=f"s3://{runtime.bucket}/runs/{run_id}/"
    )


def adapter_settings(runtime: Runtime, record: Mapping[str, Any], settings: RunSettings) -> dict[str, Any]:
    """The effective settings (Preflight): deploy-time backend settings (completed with what the deployment registered
    since, when the backend's descriptor reads a catalog), the run's own settings and its per-run backend options,
    which can never replace a deploy-time value (mtrl.contracts.run_options). A catalog that cannot be read raises
    BackendError (the caller maps it)."""
    run_id = record["run_id"]
    deploy = runtime.backend_settings.get(settings.backend, {})  # the run's backend's section
    hook = descriptor_for(settings.backend).registered_values
    if hook is not None:  # what the deployment registered after deploy (an image build, a model import)
        deploy = resolve(hook)(deploy)
    try:
        return effective_run_settings(
            deploy,
            settings,
            run_id=run_id,
            dataset_version_id=record["dataset"].get("version_id"),
        )
    except ConfigurationError as error:
        raise ConfigurationError(f"run {run_id}: {error}") from None


def stored_inputs(run_id: str, record: Mapping[str, Any]) -> ResolvedInputs:
    """The inputs as stored: the data URIs from Validate on, the effective settings from Preflight on."""
    stored = record.get(INPUTS_FIELD)
    if not stored:
        raise InternalError(f"run {run_id}: the record has no resolved inputs (Validate stores them)")
    return ResolvedInputs.from_record(run_id, stored)
