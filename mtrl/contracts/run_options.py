"""What a manifest's ``backend_options`` may set: one per-run options model per backend (its descriptor's
``run_options``).

A manifest chooses only per-run keys. Everything the operator configures at deploy time — roles, cluster and
group names, region, bucket, limits, models the EULA was accepted for — reaches the adapters from the backend
function's environment (``MTRL_BACKEND_SETTINGS``) and never from a manifest. So each backend declares its
per-run options as a strict pydantic model (unknown keys refused, ``"8"`` is not a number); manifest
resolution validates ``backend_options`` against the run's backend's model, and ``effective_settings`` (the
dict the adapter receives) refuses any option that would replace a deploy-time value, whatever the record says.

A backend's options model is its descriptor's ``run_options`` (``mtrl.contracts.registry``): a ``RunOptions``
subclass whose fields are its per-run options, bounded by their ``Field`` constraints, and whose ``supersedes``
names the deploy-time settings an option replaces when given (an AgentCore runtime instead of the deployed agent
Lambda). A backend that declares none takes none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from mtrl.contracts.descriptor import BackendDescriptor, BaselineSupport, resolve
from mtrl.contracts.errors import ConfigurationError
from mtrl.contracts.problems import problems_from_validation_error
from mtrl.contracts.registry import UnknownBackendError, descriptor_for

HyperValue = int | float | str | bool


class RunOptions(BaseModel):
    """Base of a backend's per-run options: strict types, unknown keys refused, immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    # option name → deploy-time settings it replaces in the adapter's settings when the option is given.
    supersedes: ClassVar[Mapping[str, tuple[str, ...]]] = {}


def run_options_model(backend: str) -> type[RunOptions]:
    """The backend's per-run options model (``RunOptions`` itself, taking none, when it declares none)."""
    descriptor = _descriptor(backend)
    if descriptor.run_options is None:
        return RunOptions
    loaded = resolve(descriptor.run_options)
    if not (isinstance(loaded, type) and issubclass(loaded, RunOptions)):
        raise ConfigurationError(f"backend '{backend}': {descriptor.run_options} is not a RunOptions model")
    return loaded


def _descriptor(backend: str) -> BackendDescriptor:
    try:
        return descriptor_for(backend)
    except UnknownBackendError as error:
        raise ConfigurationError(str(error)) from None


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
def baseline_support(backend: str) -> BaselineSupport | None:
    """How the backend measures a baseline (None: it cannot; its descriptor's ``no_baseline`` says why)."""
    return _descriptor(backend).baseline


def baseline_problem(backend: str, *, eval_dataset: str | None, eval_split: float = 0.0) -> str | None:
    """Why ``baseline_evaluation: true`` cannot be honoured for this run (None when it can)."""
    descriptor = _descriptor(backend)
    support = descriptor.baseline
    if support is None:
        reason = descriptor.no_baseline
        return f"key 'baseline_evaluation': not available on backend '{backend}': {reason}"
    if support.needs_held_out_rows and not eval_dataset and eval_split <= 0:
        return (
            f"key 'baseline_evaluation': backend '{backend}' evaluates the base model on held-out rows; set "
            "'eval_dataset' (a key under eval-data/) or 'eval_split'"
        )
    return None
