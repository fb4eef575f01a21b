"""The settings a serverless run is submitted with: deploy-time keys (backend settings) and the run's own choices.

Deploy-time (the serverless section shipped by ``stacks.backends.serverless``): ``region``, ``serverless_job_role_arn``,
``serverless_agent_lambda_arns`` (``"<env_id>=<function ARN>"``, one per enabled environment),
optional ``serverless_agent_runtime_arn`` (an existing Bedrock AgentCore runtime, for environments without a Lambda),
``serverless_mlflow_app_arn``, ``serverless_model_package_group_arn`` (optional
``serverless_checkpoint_model_package_group_arn``), ``serverless_base_model``, ``serverless_accept_eula``,
optional ``kms_key_arn``, ``serverless_subnet_ids`` + ``serverless_security_group_ids``.

Per run (``RunSettings``): ``environment``, ``hyperparameters`` and the ``backend_options`` listed in
``options.RUN_OPTIONS`` (the one table of what a run may choose, with ranges and sources).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from mtrl.backends._aws import Arn
from mtrl.backends.serverless.options import (
    EVALUATION_HYPERPARAMETERS,
    TRAINING_HYPERPARAMETERS,
    hyperparameter_problems,
    model_region_problem,
)
from mtrl.contracts.backend import BackendError

SCHEMA_VERSION = "1.0.0"
TRAINING_CATEGORY = "AgentRFT"
JOB_KIND = "sagemaker-job"  # the CreatedResource kind of a run's SageMaker jobs
EVALUATION_CATEGORY = "AgentRFTEvaluation"
DEFAULT_BASE_MODEL = "openai-reasoning-gpt-oss-20b"
JOB_TRUST_PRINCIPAL = "job.sagemaker.amazonaws.com"

HyperValue = str | int | float | bool


@dataclass(frozen=True)
class Agent:
    """The agent a run's jobs call: ``kind`` lambda (``arn``) or agentcore (``arn`` + ``qualifier``)."""

    kind: Literal["lambda", "agentcore"]
    arn: str
    qualifier: str = "DEFAULT"
    source: str = ""


class ServerlessSettings(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    region: str = Field(min_length=1)
    environment: str = "wordle"
    serverless_job_role_arn: str
    serverless_agent_lambda_arns: list[str] = []
    serverless_agent_runtime_arn: str | None = None
    agent_runtime_arn: str | None = None  # per run (backend_options)
    agent_qualifier: str = "DEFAULT"
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    serverless_base_model: str = DEFAULT_BASE_MODEL
    serverless_base_model_arn: str | None = None
    serverless_accept_eula: bool = False
    serverless_mlflow_app_arn: str
    serverless_mlflow_experiment: str = "mtrl"
    serverless_model_package_group_arn: str
    serverless_checkpoint_model_package_group_arn: str | None = None
    intermediate_checkpoints: bool = False
    kms_key_arn: str | None = None
    serverless_subnet_ids: list[str] = []
    serverless_security_group_ids: list[str] = []
    hyperparameters: dict[str, HyperValue] = {}
    eval_pass_k: list[int] = [1]
    eval_group_size: int = Field(1, ge=1)
    eval_hyperparameters: dict[str, HyperValue] = {}
    eval_max_runtime_seconds: int = Field(4 * 3600, ge=60)
    serverless_smoke_test_timeout_seconds: int = Field(30, ge=5, le=300)

    @field_validator(
        "serverless_job_role_arn",
        "serverless_agent_runtime_arn",
        "agent_runtime_arn",
        "serverless_base_model_arn",
        "serverless_mlflow_app_arn",
        "serverless_model_package_group_arn",
        "serverless_checkpoint_model_package_group_arn",
        "kms_key_arn",
    )
    @classmethod
    def _arn(cls, value: str | None) -> str | None:
        if value is not None:
            Arn.parse(value)
        return value

    @field_validator("serverless_agent_lambda_arns")
    @classmethod
    def _agent_entries(cls, value: list[str]) -> list[str]:
        for entry in value:
            env_id, _, arn = entry.partition("=")
            if not env_id or not arn:
                raise ValueError(f"entries are '<env_id>=<function ARN>' (got {entry!r})")
            Arn.parse(arn)
        return value

    @model_validator(mode="after")
    def _checks(self) -> ServerlessSettings:
        if bool(self.serverless_subnet_ids) != bool(self.serverless_security_group_ids):
            raise ValueError("serverless_subnet_ids and serverless_security_group_ids go together")
        problems = hyperparameter_problems(self.hyperparameters, TRAINING_HYPERPARAMETERS, where="hyperparameter")
        problems += hyperparameter_problems(
            self.eval_hyperparameters, EVALUATION_HYPERPARAMETERS, where="eval_hyperparameters"
        )
        if problems:
            raise ValueError("; ".join(problems))
        bad_k = [k for k in self.eval_pass_k if k < 1 or k > self.eval_group_size]
        if bad_k:
            raise ValueError(
                f"eval_pass_k values {bad_k} must be between 1 and eval_group_size ({self.eval_group_size})"
            )
        return self

    @property
    def agent_lambdas(self) -> dict[str, str]:
        """Environment id → the agent Lambda deployed for it."""
        return dict(entry.split("=", 1) for entry in self.serverless_agent_lambda_arns)

    @property
    def agent(self) -> Agent | None:
        """The run's agent: its own runtime ARN, else its environment's Lambda, else the deployment's runtime."""
        if self.agent_runtime_arn:
            return Agent("agentcore", self.agent_runtime_arn, self.agent_qualifier, "the run's agent_runtime_arn")
        function = self.agent_lambdas.get(self.environment)
        if function:
            return Agent("lambda", function, source=f"the agent Lambda of environment '{self.environment}'")
        if self.serverless_agent_runtime_arn:
            return Agent(
                "agentcore", self.serverless_agent_runtime_arn, source="the deployment's serverless_agent_runtime_arn"
            )
        return None

    def agent_problem(self) -> str | None:
        if self.agent is not None:
            return None
        deployed = ", ".join(sorted(self.agent_lambdas)) or "none"
        return (
            f"environment '{self.environment}' has no serverless agent (agent Lambdas are deployed for: {deployed}); "
            "enable the environment (a built-in, or use_custom_env with its custom_env_id) and redeploy, or give "
            "the run an existing Bedrock AgentCore runtime (backend_options.agent_runtime_arn)"
        )

    @property
    def agent_arn(self) -> str:
        return self.agent.arn if self.agent else ""

    @property
    def checkpoint_group_arn(self) -> str | None:
        """Where intermediate checkpoints are registered when the run asks for them."""
        if not self.intermediate_checkpoints:
            return None
        return self.serverless_checkpoint_model_package_group_arn or self.serverless_model_package_group_arn

    @property
    def base_model_arn(self) -> str:
        if self.serverless_base_model_arn:
            return self.serverless_base_model_arn
        partition = Arn.parse(self.serverless_job_role_arn).partition
        hub = "hub-content/SageMakerPublicHub/Model"
        return f"arn:{partition}:sagemaker:{self.region}:aws:{hub}/{self.serverless_base_model}"

    def model_region_problem(self) -> str | None:
        return model_region_problem(self.serverless_base_model, self.region)


def parse_settings(settings: Mapping[str, Any]) -> ServerlessSettings:
    try:
        return ServerlessSettings.model_validate(dict(settings))
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in error.errors())
        raise BackendError(f"serverless settings are invalid: {problems}") from error
