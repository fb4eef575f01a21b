"""Per-run settings: an optional manifest (``training-data/<name>.run.json``) over deploy-time defaults.

A manifest is written by whoever can upload to ``training-data/``, so it chooses only per-run keys
(``RunSettings``' fields and the backend's per-run options), each within the operator's ceilings
(``run_max_instance_count``, ``run_max_worker_count``, ``run_timeout_minutes``, ``run_max_budget_usd``);
deploy-time settings are refused by name, wherever in the manifest they appear.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from mtrl.contracts.descriptor import resolve
from mtrl.contracts.errors import ConfigurationError
from mtrl.contracts.problems import problems_from_validation_error
from mtrl.contracts.registry import descriptor_for
from mtrl.contracts.run_options import baseline_problem, effective_settings, validate_backend_options
from mtrl.health.rules import STOP_RULES
from mtrl.settings.deploy import DeploySettings
from mtrl.settings.pipeline import (
    MAX_RUN_INSTANCES,
    MAX_RUN_WORKERS,
    Backend,
    PipelineSettings,
    cluster_backend_refusal,
    manifest_ceilings,
    manifest_defaults,
    poll_budget_problem,
    worker_floor_problem,
)
from mtrl.validation.strict_json import MAX_MANIFEST_DEPTH, StrictJSONError, loads_strict, position

MAX_MANIFEST_BYTES = 64 * 1024
EVAL_DATA_PREFIX = "eval-data/"
HyperparameterValue = int | float | str | bool


EARLY_STOP_RULES = tuple(name for name in STOP_RULES if name != "incomplete")  # incomplete always fails a run


class EarlyStop(BaseModel):
    """``early_stop: {"rules": [...]}``: the training-health rules whose stop level cancels the run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: list[str] = Field(min_length=1, description="Rules with a stop level (mtrl.health.rules).")

    @field_validator("rules")
    @classmethod
    def _known_rules(cls, value: list[str]) -> list[str]:
        unknown = [name for name in value if name not in EARLY_STOP_RULES]
        if unknown:
            raise ValueError(f"{unknown} have no stop level; rules that do: {', '.join(EARLY_STOP_RULES)}")
        return value


class RunSettings(BaseModel):
    """The effective settings of one run. In a manifest every key is optional; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Backend = Field(description="Training backend.")
    environment: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$", description="Reward environment id.")
    environment_args: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments for the environment's load_environment()."
    )
    hyperparameters: dict[str, HyperparameterValue] = Field(
        default_factory=dict, description="Trainer hyperparameters (backend-specific names, scalar values)."
    )
    instance_count: int = Field(ge=1, le=MAX_RUN_INSTANCES, description="GPU instances the run holds.")
    worker_count: int = Field(ge=0, le=MAX_RUN_WORKERS, description="Reward workers the run starts.")
    eval_split: float = Field(ge=0.0, le=0.5, description="Share of rows held out for evaluation.")
    eval_dataset: str | None = Field(
        None, description="Key of a separate evaluation JSONL in the data bucket, under eval-data/."
    )
    run_timeout_minutes: int = Field(ge=5, le=7 * 24 * 60, description="Wall-clock limit of the training job.")
    max_budget_usd: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="Cost limit; the job is cancelled above it."
    )
    baseline_evaluation: bool = Field(
        False,
        description="Evaluate the base model on the held-out split before training and report it in the run "
        "summary next to the after-training score (local, serverless and verl backends, the last two with "
        "eval_dataset or eval_split; not hyperpod).",
    )
    early_stop: bool | EarlyStop = Field(
        False,
        description="Cancel the run when a training-health rule reaches its stop level (the run ends STOPPED with "
        'stop_reason naming it): true for every rule with a stop level, or {"rules": [...]}; default: notify only.',
    )
    backend_options: dict[str, Any] = Field(
        default_factory=dict,
        description="The backend's per-run options (mtrl.contracts.run_options: one strict model per backend).",
    )

    @field_validator("hyperparameters")
    @classmethod
    def _hyperparameter_names(cls, value: dict[str, HyperparameterValue]) -> dict[str, HyperparameterValue]:
        bad = [name for name in value if not name.replace("_", "").isalnum() or len(name) > 64]
        if bad:
            raise ValueError(f"names must be letters, digits and '_' (got {bad})")
        return value

    @field_validator("eval_dataset")
    @classmethod
    def _eval_dataset_key(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not value.endswith(".jsonl"):
            raise ValueError(f"must be a .jsonl object key (got {value!r})")
        if not value.startswith(EVAL_DATA_PREFIX) or ".." in value.split("/"):
            # Not under training-data/: a .jsonl there would start a run of its own.
            raise ValueError(f"must be a key under {EVAL_DATA_PREFIX} (got {value!r})")
        return value

    @model_validator(mode="after")
    def _one_evaluation_source(self) -> Self:
        if self.eval_dataset and self.eval_split > 0:
            raise ValueError("eval_split: use either eval_split or eval_dataset, not both")
        return self

    @property
    def evaluate(self) -> bool:
        """The Evaluate phase runs: a held-out split, or a baseline that needs the after-training score beside it."""
        return self.eval_split > 0 or self.eval_dataset is not None or self.baseline_evaluation


def defaults_from(settings: PipelineSettings) -> dict[str, Any]:
    """The deploy-time defaults of the per-run keys (the ``run_*`` settings marked ``manifest_default``)."""
    return manifest_defaults(settings)


def deploy_time_keys() -> frozenset[str]:
    """Every deploy-time setting name (the whole settings model); a manifest sets none of them."""
    return frozenset(DeploySettings.model_fields)


def parse_manifest(text: str | bytes, *, source: str) -> dict[str, Any]:
    """The manifest document as a dict; raises ConfigurationError naming the file, the line and the problem.

    Strict JSON (mtrl.validation.strict_json): duplicate keys, NaN/Infinity, numbers that overflow to
    infinity, lone surrogates and nesting beyond MAX_MANIFEST_DEPTH are refused, never passed on.
    """
    if len(text) > MAX_MANIFEST_BYTES:
        raise ConfigurationError(f"manifest {source} is larger than {MAX_MANIFEST_BYTES} bytes")
    if isinstance(text, bytes):
        raw = text
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            before = raw[: error.start].decode("utf-8", "replace")
            line, column = position(before, len(before))
            raise ConfigurationError(
                f"manifest {source} is not UTF-8 text (line {line} column {column}: {error.reason})"
            ) from None
    if text.startswith("\ufeff"):
        raise ConfigurationError(f"manifest {source} starts with a byte-order mark; save it as UTF-8 without BOM")
    try:
        document = loads_strict(text, max_depth=MAX_MANIFEST_DEPTH)
    except StrictJSONError as error:
        raise ConfigurationError(f"manifest {source} is not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise ConfigurationError(f"manifest {source} must be a JSON object of settings")
    return document


def _key_problems(manifest: Mapping[str, Any]) -> list[str]:
    """Keys a manifest may not set, each refused by name (deploy-time settings, or run settings misplaced)."""
    run_keys = set(RunSettings.model_fields)
    deploy = deploy_time_keys()
    problems = []
    for key in manifest:
        if key not in run_keys and key in deploy:
            manifest_key = _manifest_key_of(key)
            hint = f" (a manifest sets '{manifest_key}', within the operator's limits)" if manifest_key else ""
            problems.append(f"key '{key}': a deploy-time setting; a manifest cannot set it{hint}")
    options = manifest.get("backend_options")
    if isinstance(options, Mapping):
        for key in options:
            if key in run_keys:
                problems.append(f"key 'backend_options.{key}': a run setting; set it at the top level of the manifest")
            elif key in deploy:
                problems.append(f"key 'backend_options.{key}': a deploy-time setting; a manifest cannot set it")
    return problems


def _manifest_key_of(setting: str) -> str | None:
    extra = (
        PipelineSettings.model_fields[setting].json_schema_extra if setting in PipelineSettings.model_fields else None
    )
    return str(extra["manifest_key"]) if isinstance(extra, dict) and "manifest_key" in extra else None


def _ceiling_problems(defaults: PipelineSettings, manifest: Mapping[str, Any], settings: RunSettings) -> list[str]:
    problems = []
    for key, (setting, ceiling) in manifest_ceilings(defaults).items():
        value = getattr(settings, key)
        if ceiling is None:
            continue
        if value is None:
            problems.append(f"key '{key}': the deployment limits it to {ceiling} ({setting}); it cannot be removed")
        elif value > ceiling:
            problems.append(f"key '{key}': {value} is above the deployment's limit {ceiling} ({setting})")
    return problems


def _runtime_problems(defaults: PipelineSettings, options: Mapping[str, Any]) -> list[str]:
    """An AgentCore runtime a manifest names must be one the operator listed (it plays the run's episodes with the
    job's role: a manifest must not point a run at any runtime of the account)."""
    runtime = options.get("agent_runtime_arn")
    allowed = defaults.run_allowed_agent_runtime_arns
    if runtime is None or runtime in allowed:
        return []
    listed = ", ".join(allowed) if allowed else "none"
    return [
        f"key 'backend_options.agent_runtime_arn': {runtime} is not a runtime this deployment allows "
        f"(run_allowed_agent_runtime_arns: {listed}); ask the operator to list it and redeploy"
    ]


def resolve_run_settings(
    defaults: PipelineSettings, manifest: dict[str, Any] | None, *, source: str = "manifest"
) -> RunSettings:
    """Manifest values over deploy-time defaults, within deploy-time ceilings; every problem named in one
    ConfigurationError. Manifest values are read strictly (``"8"`` and ``true`` are not counts)."""
    manifest = manifest or {}
    problems = _key_problems(manifest)
    refused = {p.split("'")[1] for p in problems}
    given = {key: value for key, value in manifest.items() if key not in refused}
    options = given.pop("backend_options", {})
    settings: RunSettings | None = None
    try:
        # Defaults are trusted settings; only the manifest's own values are validated strictly.
        RunSettings.model_validate({**defaults_from(defaults), **given}, strict=True)
        settings = RunSettings.model_validate({**defaults_from(defaults), **given})
    except ValidationError as error:
        found = problems_from_validation_error(error, known_keys=RunSettings.model_fields)
        problems += [p.replace("setting '", "key '", 1) for p in found]
    if settings is not None:
        if not defaults.deploy_cluster and descriptor_for(settings.backend).needs_cluster:
            problems.append(cluster_backend_refusal("key 'backend'", settings.backend))
        if isinstance(options, Mapping):
            options = {key: value for key, value in options.items() if f"backend_options.{key}" not in refused}
        try:
            checked = validate_backend_options(settings.backend, options)
        except ConfigurationError as error:
            problems.append(str(error))
        else:
            settings = settings.model_copy(update={"backend_options": checked})
            problems += _runtime_problems(defaults, checked)
        manifest_check = descriptor_for(settings.backend).manifest_check
        if manifest_check is not None:
            # The backend's own rules (serverless: training hyperparameters against the service's documented ranges).
            problems += resolve(manifest_check)(settings)
        if settings.baseline_evaluation:
            problem = baseline_problem(
                settings.backend, eval_dataset=settings.eval_dataset, eval_split=settings.eval_split
            )
            if problem:
                problems.append(problem)
        floor = worker_floor_problem(settings.backend, "key 'worker_count'", settings.worker_count)
        if floor:
            given_by = "" if "worker_count" in manifest else " (the deployment's default run_worker_count)"
            problems.append(floor + given_by)
        problems += _ceiling_problems(defaults, manifest, settings)
        budget = poll_budget_problem(defaults, settings.run_timeout_minutes, baseline=settings.baseline_evaluation)
        if budget:
            problems.append(f"key 'run_timeout_minutes': {budget}")
    if problems or settings is None:
        raise ConfigurationError(f"{source}: " + "; ".join(problems))
    return settings


def effective_run_settings(
    backend_settings: Mapping[str, Any], settings: RunSettings, **run_fields: Any
) -> dict[str, Any]:
    """The settings a run's adapter is given: the deploy-time backend settings, the run's own settings (with
    ``run_fields``, e.g. its id) and its per-run backend options, which can never replace a deploy-time value
    (ConfigurationError; mtrl.contracts.run_options). Preflight stores them; ``mtrl render`` computes them offline."""
    return effective_settings(
        backend_settings,
        {**settings.model_dump(mode="json", exclude={"backend_options"}), **run_fields},
        backend=settings.backend,
        options=settings.backend_options,
    )
