"""Training-backend settings: what the ``hyperpod`` and ``serverless`` adapters get at deploy time."""

from __future__ import annotations

import re
from typing import Literal, Self

from pydantic import Field, model_validator

from mtrl.settings.base import SettingsGroup

AGENT_RUNTIME_ARN = re.compile(r"^arn:aws[a-z\-]*:bedrock-agentcore:[a-z0-9\-]+:\d{12}:runtime/[A-Za-z0-9_\-]+$")
_MLFLOW_APP_ARN = re.compile(r"^arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]+:\d{12}:mlflow-app/.+$")


class BackendSettings(SettingsGroup):
    """Training backends: Nova Forge on HyperPod (per-run GPU scale-up) and SageMaker serverless MTRL."""

    serverless_mlflow_app_arn: str | None = Field(
        None,
        description="MLflow app serverless jobs log to (the service requires one). Empty = the backends stack "
        "creates one (AWS::SageMaker::MlflowApp) with its artifacts under mlflow/ in the data bucket.",
    )
    serverless_adopt_model_package_group: bool = Field(
        False,
        description="Use the model package group <prefix>-serverless that an earlier deployment left behind (the "
        "group is retained on destroy, with the models registered in it) instead of creating it; a redeploy after "
        "`cdk destroy` needs this, since the name is taken.",
    )
    serverless_agent_runtime_arn: str | None = Field(
        None,
        description="An existing Bedrock AgentCore runtime (arn:aws:bedrock-agentcore:<region>:<account>:runtime/<id>) "
        "that plays serverless episodes of environments without a deployed agent Lambda; a manifest's "
        "backend_options.agent_runtime_arn overrides it per run (with a runtime from run_allowed_agent_runtime_arns). "
        "Empty = only the per-environment agent Lambdas.",
    )
    serverless_base_model: str = Field(
        "openai-reasoning-gpt-oss-20b",
        min_length=1,
        description="SageMaker public hub model id serverless runs fine-tune (deploy-time: the EULA acceptance "
        "is for this model, so a manifest cannot change it).",
    )
    serverless_accept_eula: bool = Field(
        False, description="Accept the base model's EULA for serverless runs (preflight fails until it is true)."
    )
    nova_model: str = Field(
        "NOVA_LITE_2",
        pattern=r"^[A-Z][A-Z0-9_]*$",
        description="Nova Forge SDK model name (amzn_nova_forge.Model member) hyperpod runs fine-tune.",
    )
    nova_training_method: Literal["RFT_MULTITURN_LORA", "RFT_MULTITURN_FULL"] = Field(
        "RFT_MULTITURN_LORA", description="Nova Forge training method of hyperpod runs."
    )
    hyperpod_capacity_timeout_minutes: int = Field(
        60,
        ge=1,
        le=24 * 60,
        description="A hyperpod run whose GPU nodes have not all arrived after this long fails with the cluster's "
        "capacity/quota events (must not exceed provision_max_wait_minutes).",
    )
    nova_forge_telemetry: bool = Field(
        False,
        description="Let the Nova Forge SDK send its anonymous usage telemetry from hyperpod runs (off: the runner "
        "sets TELEMETRY_OPT_OUT=true, since runs happen in your account).",
    )
    nova_allow_sam_role_creation: bool = Field(
        False,
        description="Let the Nova Forge RFT role create IAM roles named <stem>-nf* (only needed when the "
        "SDK's SAM template declares Lambda roles; off = no role at run time can write IAM).",
    )

    @model_validator(mode="after")
    def _agent_runtime_arn_shape(self) -> Self:
        if self.serverless_agent_runtime_arn is not None and not AGENT_RUNTIME_ARN.match(
            self.serverless_agent_runtime_arn
        ):
            raise ValueError(
                "serverless_agent_runtime_arn: must look like arn:aws:bedrock-agentcore:<region>:<account>:runtime/<id>"
            )
        return self

    @model_validator(mode="after")
    def _mlflow_app_arn_shape(self) -> Self:
        if self.serverless_mlflow_app_arn is not None and not _MLFLOW_APP_ARN.match(self.serverless_mlflow_app_arn):
            raise ValueError(
                "serverless_mlflow_app_arn: must look like arn:aws:sagemaker:<region>:<account>:mlflow-app/<id>"
            )
        return self
