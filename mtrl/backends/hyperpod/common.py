"""Settings, resource kinds and the transient 'still provisioning' error shared by the hyperpod backend's modules."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mtrl.contracts.backend import BackendError

CAPACITY_KIND = "hyperpod-capacity"
TASKS_KIND = "ecs-tasks"
STACK_KIND = "cloudformation-stack"
TASK_DEFINITIONS_KIND = "ecs-task-definitions"
WORKER_ROLE_KIND = "iam-role"

RunnerCommand = Literal["setup", "submit", "status", "cancel", "teardown"]


class ProvisioningInProgress(BackendError):
    """Not ready yet (nodes arriving, stack deploying, update running elsewhere): call ``provision`` again."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=True)


class HyperPodSettings(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    region: str = Field(min_length=1)
    prefix: str = Field("mtrl", pattern=r"^[a-z][a-z0-9-]{1,18}[a-z0-9]$")
    hyperpod_cluster_name: str = Field(min_length=1)
    hyperpod_gpu_instance_group: str = Field(min_length=1)
    hyperpod_idle_instance_count: int = Field(0, ge=0)
    # The group's run_count setting: the most instances one run may scale it to (None: no ceiling known).
    hyperpod_max_instance_count: int | None = Field(None, ge=1)
    instance_count: int = Field(ge=1, le=64)
    hyperpod_capacity_timeout_minutes: int = Field(60, ge=1)
    hyperpod_namespace: str = "kubeflow"
    ecs_cluster_arn: str = Field(min_length=1)
    task_subnet_ids: list[str] = Field(min_length=1)
    task_security_group_ids: list[str] = Field(min_length=1)
    reward_task_definition: str = Field(min_length=1)
    reward_container_name: str = "worker"
    # The run's worker role (worker_role.py): created under this permissions boundary (the most any run's worker may
    # do, deploy-time), with this deploy-time policy (environment packages, the data key through S3/SQS) attached.
    reward_worker_run_boundary_arn: str = Field(min_length=1)
    reward_worker_base_policy_arn: str = Field(min_length=1)
    worker_count: int = Field(1, ge=1, le=256)
    environment: str = Field(min_length=1)
    environment_args: dict[str, Any] = {}
    nova_runner_task_definition: str = Field(min_length=1)
    nova_runner_container_name: str = "runner"
    nova_rft_role_name: str = Field(min_length=1)
    # "<env_id>=s3://<data bucket>/nova-envs/<env_id>/<sha256>.tar.gz", one per packaged environment (the stack
    # builds and uploads them: stacks/constructs/nova_env_packages.py); the runner's CustomEnvironment(s3_uri=…).
    nova_env_package_uris: list[str] = []
    nova_model: str = "NOVA_LITE_2"
    nova_training_method: Literal["RFT_MULTITURN_LORA", "RFT_MULTITURN_FULL"] = "RFT_MULTITURN_LORA"
    hyperparameters: dict[str, str | int | float | bool] = {}
    mlflow_tracking_arn: str | None = None
    # The SDK's anonymous usage telemetry: off unless the deployment opts in (runs are in customers' accounts).
    nova_forge_telemetry: bool = False
    hyperpod_status_refresh_seconds: int = Field(60, ge=10)
    # How long one provision/submit/cancel/cleanup call may wait in-process before handing back a transient
    # "still in progress" (sized for the 15-minute backend Lambda, which the pipeline retries).
    hyperpod_wait_seconds: int = Field(600, ge=0, le=840)

    @field_validator("nova_env_package_uris")
    @classmethod
    def _package_entries(cls, value: list[str]) -> list[str]:
        seen: set[str] = set()
        for entry in value:
            env_id, _, uri = entry.partition("=")
            if not env_id or not uri.startswith("s3://") or not uri.endswith(".tar.gz"):
                raise ValueError(f"entries are '<env_id>=s3://<bucket>/<key>.tar.gz' (got {entry!r})")
            if env_id in seen:
                raise ValueError(f"environment '{env_id}' has more than one package")
            seen.add(env_id)
        return value

    def package_uri(self, run_id: str) -> str:
        """The Nova Forge package of the run's environment; a clear error when the deployment has none."""
        packages = dict(entry.partition("=")[::2] for entry in self.nova_env_package_uris)
        if self.environment not in packages:
            available = ", ".join(sorted(packages)) or "none"
            raise BackendError(
                f"run {run_id}: environment '{self.environment}' has no Nova Forge package in this deployment "
                f"(packaged: {available}); enable it (use_custom_env + custom_env_id) and redeploy"
            )
        return packages[self.environment]


# What a deployment ships only when it configures Nova Forge (stacks/backends/hyperpod: the runner task).
NOT_DEPLOYED = (
    "the hyperpod backend (Amazon Nova Forge) is not deployed here: set hyperpod_restricted_instance_group, copy your "
    "Nova Forge subscription's HyperPod CLI into docker/nova-runner/hyperpod-cli/ (its README.md) and redeploy, or "
    "run on another backend"
)


def parse_settings(settings: Mapping[str, Any]) -> HyperPodSettings:
    if "nova_runner_task_definition" not in settings:
        run_id = settings.get("run_id")
        raise BackendError(f"run {run_id}: {NOT_DEPLOYED}" if run_id else NOT_DEPLOYED)
    try:
        return HyperPodSettings.model_validate(dict(settings))
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in error.errors())
        raise BackendError(f"hyperpod settings are invalid: {problems}") from error


def now_iso(clock: Callable[[], float]) -> str:
    return datetime.fromtimestamp(clock(), UTC).isoformat()
