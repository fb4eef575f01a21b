"""What a manifest's ``backend_options`` may set: one per-run options model per backend (the only hook).

A manifest chooses only per-run keys. Everything the operator configures at deploy time — roles, cluster and
group names, region, bucket, limits, models the EULA was accepted for — reaches the adapters from the backend
function's environment (``MTRL_BACKEND_SETTINGS``) and never from a manifest. So each backend declares its
per-run options as a strict pydantic model (unknown keys refused, ``"8"`` is not a number); manifest
resolution validates ``backend_options`` against the run's backend's model, and ``effective_settings`` (the
dict the adapter receives) refuses any option that would replace a deploy-time value, whatever the record says.

To add or replace a backend's options (e.g. the serverless per-run training options), point
``RUN_OPTIONS_MODELS[backend]`` at a ``module:Model`` (or call ``register_run_options``); the model's fields
are its per-run options, bounded by their ``Field`` constraints, and its ``supersedes`` names the deploy-time
settings an option replaces when given (an AgentCore runtime instead of the deployed agent Lambda).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from mtrl.runs.errors import ConfigurationError
from mtrl.settings.base import problems_from_validation_error

HyperValue = int | float | str | bool


class RunOptions(BaseModel):
    """Base of a backend's per-run options: strict types, unknown keys refused, immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    # option name → deploy-time settings it replaces in the adapter's settings when the option is given.
    supersedes: ClassVar[Mapping[str, tuple[str, ...]]] = {}


class HyperPodRunOptions(RunOptions):
    """Nova Forge on HyperPod: no per-run options (the group, its ceiling, the roles and the model are the
    operator's); a run chooses its instance_count, worker_count and recipe overrides (hyperparameters)."""


class LocalRunOptions(RunOptions):
    """The local CPU trainer: its knobs are hyperparameters (mtrl.local.config.TrainConfig)."""


class ServerlessRunOptions(RunOptions):
    """SageMaker serverless MTRL per-run options. The names, ranges and sources are the one table in
    ``mtrl.backends.serverless.options.RUN_OPTIONS``; this model adds strict types and refuses unknown keys,
    and its validator applies that table (so a range lives in one place)."""

    agent_runtime_arn: str | None = None
    agent_qualifier: str | None = None
    reasoning_effort: str | None = None
    intermediate_checkpoints: bool | None = None
    notifications: str | None = None
    eval_group_size: int | None = None
    eval_pass_k: list[int] | None = None
    eval_max_runtime_seconds: int | None = None
    eval_hyperparameters: dict[str, HyperValue] | None = None

    @model_validator(mode="after")
    def _documented_ranges(self) -> ServerlessRunOptions:
        from mtrl.backends.serverless.options import option_problems  # noqa: PLC0415  (no import cycle at load)

        problems = option_problems(self.model_dump(exclude_none=True))
        if problems:
            raise ValueError("; ".join(problems))
        return self


# backend → "module:Model" (imported when a run of that backend is resolved).
RUN_OPTIONS_MODELS: dict[str, str] = {
    "hyperpod": "mtrl.runs.backend_options:HyperPodRunOptions",
    "serverless": "mtrl.runs.backend_options:ServerlessRunOptions",
    "local": "mtrl.runs.backend_options:LocalRunOptions",
    "verl": "mtrl.backends.verl.options:VerlRunOptions",
}
_registered: dict[str, type[RunOptions]] = {}


def register_run_options(backend: str, model: type[RunOptions]) -> None:
    """Use ``model`` as backend ``backend``'s per-run options (a custom backend, or a test)."""
    _registered[backend] = model


def unregister_run_options(backend: str) -> None:
    _registered.pop(backend, None)


def run_options_model(backend: str) -> type[RunOptions]:
    model = _registered.get(backend)
    if model is not None:
        return model
    target = RUN_OPTIONS_MODELS.get(backend)
    if target is None:
        return RunOptions  # a backend that declares none takes none
    module_name, _, attribute = target.partition(":")
    loaded = getattr(importlib.import_module(module_name), attribute)
    if not (isinstance(loaded, type) and issubclass(loaded, RunOptions)):
        raise ConfigurationError(f"backend '{backend}': {target} is not a RunOptions model")
    return loaded


def per_run_option_names(backend: str) -> frozenset[str]:
    return frozenset(run_options_model(backend).model_fields)


def validate_backend_options(backend: str, options: Any, *, strict: bool = True) -> dict[str, Any]:
    """The options a manifest gave, checked against the backend's model; raises ConfigurationError naming keys.

    ``strict``: manifest input (``"8"`` is not a number); a stored record (JSON round trip) is read laxly.
    """
    if not isinstance(options, Mapping):
        raise ConfigurationError("key 'backend_options': must be an object")
    model = run_options_model(backend)
    try:
        parsed = model.model_validate(dict(options), strict=strict)
    except ValidationError as error:
        allowed = ", ".join(sorted(model.model_fields)) or "none"
        problems = [
            p.replace("setting '", "key 'backend_options.", 1).replace(
                "unknown setting",
                f"not a per-run option of backend '{backend}' (per-run options: {allowed}; "
                "deploy-time settings never come from a manifest)",
            )
            for p in problems_from_validation_error(error)
        ]
        raise ConfigurationError("; ".join(problems)) from None
    return parsed.model_dump(mode="json", exclude_unset=True)


def effective_settings(
    deploy: Mapping[str, Any], run: Mapping[str, Any], *, backend: str, options: Mapping[str, Any]
) -> dict[str, Any]:
    """What the adapter sees: deploy-time backend settings, the run's validated settings, its per-run options.

    Refuses (ConfigurationError) options that would replace a deploy-time setting or a run setting, so a record
    written before these checks, or tampered with, cannot lift the operator's limits either.
    """
    checked = validate_backend_options(backend, options, strict=False)
    replaced = sorted(set(checked) & (set(deploy) | set(run)))
    if replaced:
        raise ConfigurationError(
            "backend_options may not replace deploy-time or run settings (" + ", ".join(replaced) + ")"
        )
    overlap = sorted(set(run) & set(deploy))
    if overlap:
        raise ConfigurationError(
            "the deployment's backend settings collide with run settings (" + ", ".join(overlap) + ")"
        )
    merged = {**deploy, **run, **checked}
    for option, superseded in run_options_model(backend).supersedes.items():
        if checked.get(option) is not None:
            for name in superseded:
                merged.pop(name, None)
    return merged


# -- the baseline evaluation before training (know the starting point before spending on training: the SageMaker AI
# multi-turn RL best-practices post) ------------------------------------------------------------------------------
@dataclass(frozen=True)
class BaselineSupport:
    """How a backend measures a run's ``baseline_evaluation`` (the base model on the held-out split).

    ``phase``: True — the pipeline's Baseline phase runs before Submit (the adapter's ``baseline(run)``, a wait loop
    like Evaluate's); False — training itself evaluates the untrained policy first, and the Evaluate phase reports it.
    """

    phase: bool
    how: str
    needs_held_out_rows: bool = False  # an eval_dataset, or an eval_split (Validate writes its split files)


BASELINE_SUPPORT: dict[str, BaselineSupport] = {
    "local": BaselineSupport(
        phase=False,
        how="the untrained policy's held-out evaluation at step 0 (same tasks and seed as the after-training one)",
    ),
    "verl": BaselineSupport(
        phase=False,
        how="verl's validation before training (trainer.val_before_train): the base model plays the held-out rows "
        "through the same mtrl agent loop as training, and again after the last step",
        needs_held_out_rows=True,
    ),
    "serverless": BaselineSupport(
        phase=True,
        how="an AgentRFTEvaluation job of the base model on the held-out rows, before the training job",
        needs_held_out_rows=True,
    ),
}
BASELINE_UNSUPPORTED: dict[str, str] = {
    "hyperpod": (
        "Nova Forge on HyperPod has no evaluation path in mtrl (its Evaluate phase is skipped), so there is no "
        "evaluation to run before training nor an after-training score to compare it with; measure the base model "
        "with `mtrl eval ENV --policy hf:MODEL` (or openai:URL), or use the serverless or local backend"
    ),
}


def baseline_problem(backend: str, *, eval_dataset: str | None, eval_split: float = 0.0) -> str | None:
    """Why ``baseline_evaluation: true`` cannot be honoured for this run (None when it can)."""
    support = BASELINE_SUPPORT.get(backend)
    if support is None:
        reason = BASELINE_UNSUPPORTED.get(backend, "the backend declares no baseline evaluation")
        return f"key 'baseline_evaluation': not available on backend '{backend}': {reason}"
    if support.needs_held_out_rows and not eval_dataset and eval_split <= 0:
        return (
            f"key 'baseline_evaluation': backend '{backend}' evaluates the base model on held-out rows; set "
            "'eval_dataset' (a key under eval-data/) or 'eval_split'"
        )
    return None
