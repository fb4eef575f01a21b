"""Per-run settings: an optional manifest (``training-data/<name>.run.json``) over deploy-time defaults."""

from __future__ import annotations

import json
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from mtrl.backends.serverless_options import manifest_problems
from mtrl.runs.errors import ConfigurationError
from mtrl.settings.base import problems_from_validation_error
from mtrl.settings.pipeline import PipelineSettings, poll_budget_problem

MAX_MANIFEST_BYTES = 64 * 1024
EVAL_DATA_PREFIX = "eval-data/"
HyperparameterValue = int | float | str | bool


class RunSettings(BaseModel):
    """The effective settings of one run. In a manifest every key is optional; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["hyperpod", "serverless", "local"] = Field(description="Training backend.")
    environment: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$", description="Reward environment id.")
    environment_args: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments for the environment's load_environment()."
    )
    hyperparameters: dict[str, HyperparameterValue] = Field(
        default_factory=dict, description="Trainer hyperparameters (backend-specific names, scalar values)."
    )
    instance_count: int = Field(ge=1, le=64, description="GPU instances the run holds.")
    worker_count: int = Field(ge=0, le=256, description="Reward workers the run starts.")
    eval_split: float = Field(ge=0.0, le=0.5, description="Share of rows held out for evaluation.")
    eval_dataset: str | None = Field(
        None, description="Key of a separate evaluation JSONL in the data bucket, under eval-data/."
    )
    run_timeout_minutes: int = Field(ge=5, le=7 * 24 * 60, description="Wall-clock limit of the training job.")
    max_budget_usd: float | None = Field(None, gt=0, description="Cost limit; the job is cancelled above it.")
    backend_options: dict[str, Any] = Field(
        default_factory=dict, description="Backend-specific per-run settings (checked by the backend's preflight)."
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
        return self.eval_split > 0 or self.eval_dataset is not None


def defaults_from(settings: PipelineSettings) -> dict[str, Any]:
    return {
        "backend": settings.run_backend,
        "environment": settings.run_environment,
        "instance_count": settings.run_instance_count,
        "worker_count": settings.run_worker_count,
        "eval_split": settings.run_eval_split,
        "run_timeout_minutes": settings.run_timeout_minutes,
        "max_budget_usd": settings.run_max_budget_usd,
    }


def parse_manifest(text: str | bytes, *, source: str) -> dict[str, Any]:
    """The manifest document as a dict; raises ConfigurationError naming the file and the problem."""
    if len(text) > MAX_MANIFEST_BYTES:
        raise ConfigurationError(f"manifest {source} is larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConfigurationError(f"manifest {source} is not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise ConfigurationError(f"manifest {source} must be a JSON object of settings")
    return document


def resolve_run_settings(
    defaults: PipelineSettings, manifest: dict[str, Any] | None, *, source: str = "manifest"
) -> RunSettings:
    """Manifest values over deploy-time defaults; every problem is named in one ConfigurationError."""
    values = {**defaults_from(defaults), **(manifest or {})}
    try:
        settings = RunSettings.model_validate(values)
    except ValidationError as error:
        problems = [p.replace("setting '", "key '", 1) for p in problems_from_validation_error(error)]
        raise ConfigurationError(f"{source}: " + "; ".join(problems)) from None
    if settings.backend == "serverless":
        # Per-run serverless choices against the service's documented ranges (one table, its own module).
        problems = manifest_problems(settings.hyperparameters, settings.backend_options)
        if problems:
            raise ConfigurationError(f"{source}: " + "; ".join(problems))
    problem = poll_budget_problem(defaults, settings.run_timeout_minutes)
    if problem:
        raise ConfigurationError(f"{source}: key 'run_timeout_minutes': {problem}")
    return settings
