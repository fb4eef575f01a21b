"""A sessions run's per-run options (``backend_options``), each bounded; the deploy-time values (roles, the task that
runs the loop) come from ``settings.SessionsSettings`` and never from a manifest."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, model_validator

from mtrl.contracts.run_options import RunOptions

# A SageMaker Hub model's ARN, as CreateTrainingSession's ModelConfig.BaseModelArn takes it.
HUB_MODEL_ARN = re.compile(r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:(\d{12}|aws):hub-content/[^/]+/Model/[^/]+(/[^/]+)?$")
TINY_MODEL = "tiny"  # the local service's built-in tiny model (``LocalTrainingService.tiny``)


class SessionsRunOptions(RunOptions):
    """``service``: where the model trains (``sagemaker``: a SageMaker training session; ``local``: the torch + PEFT
    twin in the loop's own process). ``base_model``: SageMaker — a Hub model ARN; local — ``tiny`` or a local
    directory holding a chat model. ``tokenizer``: the base model's tokenizer (a Hugging Face id or a directory the
    loop can read); SageMaker needs one (the loop renders and counts tokens itself), local uses the model's own."""

    service: Literal["sagemaker", "local"] = "sagemaker"
    base_model: str | None = Field(default=None, min_length=1, max_length=512)
    tokenizer: str | None = Field(default=None, min_length=1, max_length=512)
    lora_rank: int = Field(default=16, ge=1, le=256)  # CreateTrainingSession's LoraConfig.Rank range
    steps: int = Field(default=10, ge=1, le=1000)
    group_size: int = Field(default=4, ge=2, le=64)
    tasks_per_step: int = Field(default=4, ge=1, le=256)
    learning_rate: float = Field(default=1e-4, gt=0, le=0.01)
    max_tokens: int = Field(default=256, ge=1, le=8192)
    temperature: float = Field(default=1.0, ge=0, le=2)
    loss: Literal["importance_sampling", "ppo"] = "importance_sampling"
    seed: int = Field(default=0, ge=0, le=2**31 - 1)

    @model_validator(mode="after")
    def _model_fits_the_service(self) -> SessionsRunOptions:
        if self.service == "sagemaker":
            if self.base_model is None or not HUB_MODEL_ARN.match(self.base_model):
                raise ValueError(
                    "base_model: a SageMaker run needs a SageMaker Hub model ARN (…:hub-content/…/Model/…)"
                )
            if self.tokenizer is None:
                raise ValueError("tokenizer: a SageMaker run needs the base model's tokenizer (a Hugging Face id)")
        elif self.base_model is not None and self.base_model != TINY_MODEL and not self.base_model.startswith("/"):
            raise ValueError(f"base_model: a local run takes '{TINY_MODEL}' or an absolute path to a model directory")
        return self

    @property
    def model(self) -> str:
        return self.base_model or TINY_MODEL


def run_options(settings: Mapping[str, Any]) -> SessionsRunOptions:
    """The options of a run's effective settings (a stored record is read laxly: JSON has one number type)."""
    given = {name: settings[name] for name in SessionsRunOptions.model_fields if name in settings}
    return SessionsRunOptions.model_validate(given, strict=False)
