"""Pipeline settings: concurrency slots, polling, per-run defaults and ceilings, dataset limits and alerts.

The ``run_*`` settings are the defaults and ceilings of the per-run keys a run manifest
(``training-data/<name>.run.json``) may set; each names its manifest key in its field metadata
(``manifest_key``, with ``manifest_default`` and/or ``manifest_ceiling``). They reach the Lambdas as one
JSON environment variable (``MTRL_PIPELINE_SETTINGS``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Self

from pydantic import AfterValidator, Field, field_validator, model_validator

from mtrl.contracts.registry import BUILTIN_BACKENDS, UnknownBackendError, check_backend_name, descriptor_for
from mtrl.settings.backends import AGENT_RUNTIME_ARN
from mtrl.settings.base import SettingsGroup
from mtrl.settings.dataset_limits import (
    DATASET_MAX_BYTES,
    DATASET_MAX_LINE_BYTES,
    DATASET_MAX_ROWS,
    DATASET_MIN_ROWS,
)

# A backend registered in mtrl.contracts.registry (the built-ins, and any a platform team registers).
Backend = Annotated[str, AfterValidator(check_backend_name)]
MAX_RUN_INSTANCES = 64
MAX_RUN_WORKERS = 256


def worker_floor_problem(backend: str, key: str, count: int | None) -> str | None:
    """Why ``count`` reward workers cannot serve a ``backend`` run (``key`` names the setting), else None.

    A backend whose rollouts are scored only by the run's reward workers (its descriptor's ``needs_reward_workers``)
    cannot score any with fewer than one."""
    try:
        needs_workers = descriptor_for(backend).needs_reward_workers
    except UnknownBackendError:
        return None  # the backend name itself is the problem, reported where it is validated
    if needs_workers and count is not None and count < 1:
        return (
            f"{key}: {count} reward workers cannot score a rollout; the {backend} backend scores every rollout "
            "on reward workers, so it needs at least 1"
        )
    return None


def _per_run(key: str, *, default: bool = True, ceiling: bool = False) -> dict[str, Any]:
    """Field metadata: this deploy-time setting is the default and/or the ceiling of manifest key ``key``."""
    return {"manifest_key": key, "manifest_default": default, "manifest_ceiling": ceiling}


_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


class PipelineSettings(SettingsGroup):
    """The upload-triggered run pipeline: slots, polling, run defaults, dataset limits and alerts."""

    max_concurrent_runs: int = Field(
        1,
        ge=1,
        le=16,
        description="Runs that may hold the training cluster at once; later runs wait in order. Above 1 only with "
        "emulator: concurrent runs must not share a GPU group, and a deployment has one training group.",
    )
    slot_poll_seconds: int = Field(
        60, ge=0, le=3600, description="Seconds a waiting run sleeps between attempts to take a slot."
    )
    slot_max_wait_minutes: int = Field(
        24 * 60, ge=1, le=7 * 24 * 60, description="A run that waited this long for a slot fails (nothing provisioned)."
    )
    slot_lease_minutes: int = Field(
        60,
        ge=5,
        le=24 * 60,
        description="A slot whose holder has not renewed it for this long is free again (frees a crashed run's slot).",
    )
    status_poll_seconds: int = Field(
        300, ge=0, le=3600, description="Seconds between two polls of a running training job's status."
    )
    provision_poll_seconds: int = Field(
        60,
        ge=0,
        le=3600,
        description="Seconds between two checks of a run's provisioning (GPU scale-up, per-run stack, workers).",
    )
    provision_max_wait_minutes: int = Field(
        90,
        ge=1,
        le=24 * 60,
        description="A run whose backend is not provisioned after this long fails (and is torn down); bounds the "
        "wait for GPU capacity.",
    )
    evaluation_poll_seconds: int = Field(
        60, ge=0, le=3600, description="Seconds between two checks of a run's evaluation job."
    )
    evaluation_max_wait_minutes: int = Field(
        4 * 60,
        ge=1,
        le=24 * 60,
        description="A run whose evaluation has not finished after this long fails (the evaluation job is stopped).",
    )
    deploy_cluster: bool = Field(
        True,
        description="Create the EKS control plane and the HyperPod cluster the verl and hyperpod backends train on "
        "(about USD 73 a month at rest for EKS alone). false: no cluster (the serverless profile, "
        "deployment_profile=serverless): runs use the serverless, sessions or local backends, and verl and hyperpod "
        "runs are refused.",
    )
    run_backend: Backend = Field(
        "verl",
        description="Default training backend of a run, a backend registered in mtrl.contracts.registry (built in: "
        + ", ".join(f"'{name}'" for name in BUILTIN_BACKENDS)
        + "): 'verl' (open-weight GRPO on the training group), or 'hyperpod' (Nova Forge, the default when "
        "hyperpod_restricted_instance_group is set, which it needs).",
        json_schema_extra=_per_run("backend"),
    )
    run_environment: str = Field(
        "wordle",
        pattern=r"^[a-z][a-z0-9_]{0,63}$",
        description="Default reward environment id of a run.",
        json_schema_extra=_per_run("environment"),
    )
    run_instance_count: int = Field(
        1,
        ge=1,
        le=MAX_RUN_INSTANCES,
        description="Default number of GPU instances a run holds (at most run_max_instance_count).",
        json_schema_extra=_per_run("instance_count"),
    )
    run_max_instance_count: int | None = Field(
        None,
        ge=1,
        le=MAX_RUN_INSTANCES,
        description="Most GPU instances one run may hold: a manifest asking for more is refused. Empty = the "
        "run_count of the instance group runs scale (64 with an existing cluster); never above that run_count.",
        json_schema_extra=_per_run("instance_count", default=False, ceiling=True),
    )
    run_worker_count: int = Field(
        2,
        ge=0,
        le=MAX_RUN_WORKERS,
        description="Default number of reward workers a run starts (at most run_max_worker_count; at least 1 for "
        "hyperpod, whose rollouts only reward workers score).",
        json_schema_extra=_per_run("worker_count"),
    )
    run_max_worker_count: int | None = Field(
        None,
        ge=0,
        le=MAX_RUN_WORKERS,
        description="Most reward workers one run may start: a manifest asking for more is refused. Empty = "
        "reward_worker_max_tasks; never above it.",
        json_schema_extra=_per_run("worker_count", default=False, ceiling=True),
    )
    run_eval_split: float = Field(
        0.0,
        ge=0.0,
        le=0.5,
        description="Default share of rows held out for evaluation (0 disables evaluation).",
        json_schema_extra=_per_run("eval_split"),
    )
    run_timeout_minutes: int = Field(
        12 * 60,
        ge=5,
        le=7 * 24 * 60,
        description="Wall-clock limit of a training job (then it is cancelled); a manifest may ask for less, "
        "never more.",
        json_schema_extra=_per_run("run_timeout_minutes", ceiling=True),
    )
    run_max_budget_usd: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Cost limit of a run in USD (empty = no limit); the job is cancelled above it. A manifest may "
        "set a lower limit, never a higher one or none.",
        json_schema_extra=_per_run("max_budget_usd", ceiling=True),
    )
    run_allowed_agent_runtime_arns: list[str] = Field(
        default_factory=list,
        description="The Bedrock AgentCore runtimes (arn:aws:bedrock-agentcore:<region>:<account>:runtime/<id>) a "
        "serverless run's manifest may name in backend_options.agent_runtime_arn; any other runtime is refused at "
        "Register. Empty = a manifest cannot name a runtime.",
    )
    dataset_max_bytes: int = Field(DATASET_MAX_BYTES, ge=1024, description="Largest accepted dataset object, in bytes.")
    dataset_max_rows: int = Field(DATASET_MAX_ROWS, ge=1, description="Most rows accepted in one dataset.")
    dataset_min_rows: int = Field(DATASET_MIN_ROWS, ge=1, description="Fewest rows a dataset must have.")
    dataset_max_line_bytes: int = Field(
        DATASET_MAX_LINE_BYTES, ge=256, le=64 * 1024 * 1024, description="Longest accepted JSONL line, in bytes."
    )
    validation_max_errors: int = Field(
        50, ge=1, le=10_000, description="Errors listed in a validation report (counting continues past it)."
    )
    alert_email: str | None = Field(
        None, description="E-mail address subscribed to run notifications and alarms (empty = no subscription)."
    )

    @field_validator("alert_email")
    @classmethod
    def _email_is_plausible(cls, value: str | None) -> str | None:
        if value is not None and not _EMAIL.match(value):
            raise ValueError("must be an e-mail address like ml-team@example.com")
        return value

    @field_validator("run_allowed_agent_runtime_arns")
    @classmethod
    def _runtime_arns_shape(cls, value: list[str]) -> list[str]:
        bad = [arn for arn in value if not AGENT_RUNTIME_ARN.match(arn)]
        if bad:
            raise ValueError(
                f"not AgentCore runtime ARNs (arn:aws:bedrock-agentcore:<region>:<account>:runtime/<id>): {bad}"
            )
        if len(set(value)) != len(value):
            raise ValueError("contains duplicates")
        return value

    @model_validator(mode="after")
    def _row_bounds_ordered(self) -> Self:
        if self.dataset_min_rows > self.dataset_max_rows:
            raise ValueError("dataset_min_rows: must not exceed dataset_max_rows")
        return self

    @model_validator(mode="after")
    def _default_backend_has_workers(self) -> Self:
        for key in ("run_max_worker_count", "run_worker_count"):
            problem = worker_floor_problem(self.run_backend, key, getattr(self, key))
            if problem:
                raise ValueError(problem)
        return self

    @model_validator(mode="before")
    @classmethod
    def _default_backend_needs_no_cluster_without_one(cls, values: Any) -> Any:
        # Without a cluster the default backend is serverless (verl, the usual default, trains on the cluster).
        if isinstance(values, dict) and values.get("run_backend") is None and _false(values.get("deploy_cluster")):
            return {**values, "run_backend": "serverless"}
        return values

    @model_validator(mode="after")
    def _default_backend_has_its_cluster(self) -> Self:
        if not self.deploy_cluster and descriptor_for(self.run_backend).needs_cluster:
            raise ValueError(cluster_backend_refusal("run_backend", self.run_backend))
        return self

    @model_validator(mode="after")
    def _run_defaults_within_ceilings(self) -> Self:
        for name, ceiling in (
            ("run_instance_count", "run_max_instance_count"),
            ("run_worker_count", "run_max_worker_count"),
        ):
            limit = getattr(self, ceiling)
            if limit is not None and getattr(self, name) > limit:
                raise ValueError(f"{name}: {getattr(self, name)} is above {ceiling} ({limit})")
        return self

    def derived_run_ceilings(self) -> dict[str, int]:
        """Ceilings left empty whose value follows from other settings (DeploySettings knows them)."""
        return {}

    @model_validator(mode="after")
    def _polls_fit_in_one_execution(self) -> Self:
        problem = poll_budget_problem(self, self.run_timeout_minutes)
        if problem:
            raise ValueError(f"status_poll_seconds: {problem}")
        return self


# A Standard execution keeps at most 25,000 history events; one wait-and-poll loop adds about 9.
MAX_POLLS_PER_RUN = 2500


def poll_budget_problem(settings: PipelineSettings, run_timeout_minutes: int, *, baseline: bool = False) -> str | None:
    """Why the longest slot wait, provisioning wait, job and evaluation (twice with a baseline evaluation before
    training: the same bounded wait loop) would overflow one execution's history."""
    slot_polls = settings.slot_max_wait_minutes * 60 // max(settings.slot_poll_seconds, 1)
    provision_polls = settings.provision_max_wait_minutes * 60 // max(settings.provision_poll_seconds, 1)
    status_polls = run_timeout_minutes * 60 // max(settings.status_poll_seconds, 1)
    evaluation_polls = settings.evaluation_max_wait_minutes * 60 // max(settings.evaluation_poll_seconds, 1)
    evaluations = 2 if baseline else 1
    total = slot_polls + provision_polls + status_polls + evaluations * evaluation_polls
    if total <= MAX_POLLS_PER_RUN:
        return None
    return (
        f"waiting up to {settings.slot_max_wait_minutes} min for a slot every {settings.slot_poll_seconds} s, up to "
        f"{settings.provision_max_wait_minutes} min for provisioning every {settings.provision_poll_seconds} s and "
        f"running up to {run_timeout_minutes} min polled every {settings.status_poll_seconds} s and evaluating "
        f"{'twice (baseline and after training) ' if baseline else ''}up to "
        f"{settings.evaluation_max_wait_minutes} min polled every {settings.evaluation_poll_seconds} s takes "
        f"{total} polls; one execution allows {MAX_POLLS_PER_RUN} (poll less often or shorten the limits)"
    )


PIPELINE_SETTINGS_ENV = "MTRL_PIPELINE_SETTINGS"


def pipeline_settings_json(settings: PipelineSettings) -> str:
    """The pipeline settings as the JSON document the Lambdas receive (only this group's keys, with the
    ceilings that follow from other groups filled in)."""
    values: dict[str, Any] = {name: getattr(settings, name) for name in PipelineSettings.model_fields}
    values.update(settings.derived_run_ceilings())
    return PipelineSettings.model_validate(values).model_dump_json()


def _manifest_meta(name: str) -> dict[str, Any]:
    extra = PipelineSettings.model_fields[name].json_schema_extra
    return extra if isinstance(extra, dict) and "manifest_key" in extra else {}


def manifest_defaults(settings: PipelineSettings) -> dict[str, Any]:
    """Manifest key → its deploy-time default (from the fields marked ``manifest_default``)."""
    return {
        str(meta["manifest_key"]): getattr(settings, name)
        for name in PipelineSettings.model_fields
        if (meta := _manifest_meta(name)).get("manifest_default")
    }


def manifest_ceilings(settings: PipelineSettings) -> dict[str, tuple[str, Any]]:
    """Manifest key → (the deploy-time setting that bounds it, its value; None = no ceiling set)."""
    return {
        str(meta["manifest_key"]): (name, getattr(settings, name))
        for name in PipelineSettings.model_fields
        if (meta := _manifest_meta(name)).get("manifest_ceiling")
    }


def cluster_backend_refusal(key: str, backend: str) -> str:
    """Why ``backend`` cannot run in a deployment without a cluster (settings and manifests say the same)."""
    return (
        f"{key}: '{backend}' trains on the deployment's HyperPod cluster, and this deployment has none "
        "(deploy_cluster=false, the serverless profile); use 'serverless', 'sessions' or 'local', or deploy with "
        "deploy_cluster=true"
    )


def _false(value: Any) -> bool:
    return value is False or (isinstance(value, str) and value.strip().lower() in {"false", "0", "no", "off"})
