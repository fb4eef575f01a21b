"""What one verl run resolves to: the deployment's ``verl_*`` settings, the run's settings and its per-run options,
checked against the deployment's ceilings (the one place they are applied: render, Preflight and Submit).

``verl_pipeline_values`` is the one mapping from deploy-time settings to the values the adapter receives (the verl
section of ``MTRL_BACKEND_SETTINGS``): verl's stack side ships it, and ``mtrl render`` uses it offline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mtrl.backends.verl.supply import missing_steps
from mtrl.contracts.backend import BackendError
from mtrl.settings.verl import VerlModelSettings

if TYPE_CHECKING:
    from mtrl.settings.deploy import DeploySettings


class Taint(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    value: str | None = None
    effect: str = "NoSchedule"


class VerlRunConfig(BaseModel):
    """The adapter's settings of one run (``RunContext.settings``): the deployment's verl values
    (``verl_pipeline_values``, shipped as JSON) merged with the run's settings and its per-run options."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    run_id: str = Field(min_length=1)
    region: str = Field(min_length=1)
    prefix: str = Field("mtrl", min_length=1)
    hyperpod_cluster_name: str = Field(min_length=1)
    eks_cluster_name: str = Field(min_length=1)
    verl_instance_group: str = Field(min_length=1)
    verl_instance_type: str = Field(min_length=1)
    verl_instance_taints: list[Taint] = []
    verl_idle_instance_count: int = Field(0, ge=0)
    verl_max_instance_count: int | None = Field(None, ge=1)
    verl_namespace: str = Field(min_length=1)
    verl_image_uri: str | None = None
    # The trainer role each run's Pod Identity association names, scoped to the run (mtrl.backends.verl.run_identity).
    verl_trainer_role_arn: str | None = None
    verl_models: list[VerlModelSettings] = []
    verl_hub_downloads: bool = False
    verl_kueue_queue_name: str | None = None
    verl_lora_rank: int = 32
    verl_max_lora_rank: int = 64
    verl_allow_full_finetuning: bool = False
    verl_group_size: int = 8
    verl_max_group_size: int = 16
    verl_steps: int = 100
    verl_max_steps: int = 1000
    verl_prompt_length: int = 1024
    verl_max_prompt_length: int = 4096
    verl_response_length: int = 2048
    verl_max_response_length: int = 8192
    verl_pre_running_deadline_minutes: int = Field(30, ge=1)
    verl_ttl_seconds_after_finished: int = Field(30, ge=0, le=60)
    # The deployment's MLflow app (shipped once for every backend): where the trainer's metrics go.
    serverless_mlflow_app_arn: str | None = None
    # the run's own settings
    environment: str = Field(min_length=1)
    environment_args: dict[str, Any] = {}
    hyperparameters: dict[str, str | int | float | bool] = {}
    instance_count: int = Field(ge=1)
    run_timeout_minutes: int = Field(ge=1)
    baseline_evaluation: bool = False
    # the manifest's backend_options (mtrl.backends.verl.options), merged flat by effective_settings
    model: str | None = None
    lora_rank: int | None = None
    group_size: int | None = None
    steps: int | None = None
    max_prompt_length: int | None = None
    max_response_length: int | None = None


@dataclass(frozen=True)
class VerlPlan:
    """The resolved training plan of one run (every value within the deployment's ceilings)."""

    config: VerlRunConfig
    image: str
    model: VerlModelSettings
    lora_rank: int
    group_size: int
    steps: int
    max_prompt_length: int
    max_response_length: int

    @property
    def run_id(self) -> str:
        return self.config.run_id


def parse_config(settings: Mapping[str, Any]) -> VerlRunConfig:
    try:
        return VerlRunConfig.model_validate(dict(settings))
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in error.errors())
        run_id = settings.get("run_id", "?")
        raise BackendError(f"run {run_id}: verl settings are invalid: {problems}") from None


def _bounded(problems: list[str], name: str, value: int, ceiling: int, ceiling_name: str) -> int:
    if value > ceiling:
        problems.append(f"{name} {value} is above the deployment's limit {ceiling} ({ceiling_name})")
    return value


def plan_for(settings: Mapping[str, Any]) -> VerlPlan:
    """The run's plan; one BackendError naming every problem (and the run id) when the run cannot train."""
    config = parse_config(settings)
    problems: list[str] = []
    models = {model.id: model for model in config.verl_models}
    chosen = config.model or (config.verl_models[0].id if config.verl_models else None)
    model = models.get(chosen) if chosen else None
    # What the deployment has not supplied yet, each with the command that supplies it (mtrl.backends.verl.catalog).
    problems += missing_steps(
        prefix=config.prefix, image_uri=config.verl_image_uri, models=config.verl_models if chosen else []
    )
    if chosen is not None and model is None:
        problems.append(f"model '{chosen}' is not one of the deployment's verl_models ({', '.join(sorted(models))})")
    lora_rank = config.verl_lora_rank if config.lora_rank is None else config.lora_rank
    _bounded(problems, "lora_rank", lora_rank, config.verl_max_lora_rank, "verl_max_lora_rank")
    if lora_rank == 0 and not config.verl_allow_full_finetuning:
        problems.append("lora_rank 0 (full fine-tuning) is not allowed by this deployment (verl_allow_full_finetuning)")
    group_size = _bounded(
        problems,
        "group_size",
        config.verl_group_size if config.group_size is None else config.group_size,
        config.verl_max_group_size,
        "verl_max_group_size",
    )
    steps = _bounded(
        problems,
        "steps",
        config.verl_steps if config.steps is None else config.steps,
        config.verl_max_steps,
        "verl_max_steps",
    )
    prompt = _bounded(
        problems,
        "max_prompt_length",
        config.verl_prompt_length if config.max_prompt_length is None else config.max_prompt_length,
        config.verl_max_prompt_length,
        "verl_max_prompt_length",
    )
    response = _bounded(
        problems,
        "max_response_length",
        config.verl_response_length if config.max_response_length is None else config.max_response_length,
        config.verl_max_response_length,
        "verl_max_response_length",
    )
    ceiling = config.verl_max_instance_count
    if ceiling is not None and config.instance_count > ceiling:
        problems.append(
            f"instance_count {config.instance_count} is above the run_count {ceiling} of {config.verl_instance_group}"
        )
    if problems or model is None or config.verl_image_uri is None:
        raise BackendError(f"run {config.run_id}: " + "; ".join(problems))
    return VerlPlan(
        config=config,
        image=config.verl_image_uri,
        model=model,
        lora_rank=lora_rank,
        group_size=group_size,
        steps=steps,
        max_prompt_length=prompt,
        max_response_length=response,
    )


def verl_namespace(settings: DeploySettings) -> str:
    """The Kubernetes namespace of a deployment's RayJobs (the cluster stack creates it and its Role)."""
    return settings.verl_namespace or f"{settings.prefix}-verl"


def verl_pipeline_values(
    settings: DeploySettings,
    *,
    region: str,
    hyperpod_cluster_name: str,
    eks_cluster_name: str,
    mlflow_app_arn: str | None,
    trainer_role_arn: str | None = None,
) -> VerlRunConfig:
    """The deploy-time part of a deployment's verl settings, as the pipeline ships them (only these fields set; built
    without validation, since the stacks pass CDK tokens for the names and ARNs they create)."""
    group = settings.training_instance_group
    return VerlRunConfig.model_construct(
        region=region,
        prefix=settings.prefix,
        hyperpod_cluster_name=hyperpod_cluster_name,
        eks_cluster_name=eks_cluster_name,
        verl_instance_group=group.name,
        verl_instance_type=group.instance_type,
        verl_instance_taints=[Taint.model_validate(taint.model_dump()) for taint in group.taints],
        verl_idle_instance_count=group.idle_count,
        verl_max_instance_count=None if settings.uses_existing_cluster else group.run_count,
        verl_namespace=verl_namespace(settings),
        verl_image_uri=settings.verl_image_uri,
        verl_trainer_role_arn=trainer_role_arn,
        verl_models=list(settings.verl_models),
        verl_hub_downloads=settings.verl_hub_downloads,
        verl_kueue_queue_name=settings.verl_kueue_queue_name,
        verl_lora_rank=settings.verl_lora_rank,
        verl_max_lora_rank=settings.verl_max_lora_rank,
        verl_allow_full_finetuning=settings.verl_allow_full_finetuning,
        verl_group_size=settings.verl_group_size,
        verl_max_group_size=settings.verl_max_group_size,
        verl_steps=settings.verl_steps,
        verl_max_steps=settings.verl_max_steps,
        verl_prompt_length=settings.verl_prompt_length,
        verl_max_prompt_length=settings.verl_max_prompt_length,
        verl_response_length=settings.verl_response_length,
        verl_max_response_length=settings.verl_max_response_length,
        verl_pre_running_deadline_minutes=settings.verl_pre_running_deadline_minutes,
        verl_ttl_seconds_after_finished=settings.verl_ttl_seconds_after_finished,
        serverless_mlflow_app_arn=mlflow_app_arn,
    )
