"""A manifest's per-run options for the ``verl`` backend (``backend_options``).

The fields' bounds here are the absolute ones; the deployment's ceilings (``verl_max_*``, the model list, full
fine-tuning) are applied where deploy-time and run settings meet: mtrl.backends.verl.config.
"""

from __future__ import annotations

from pydantic import Field

from mtrl.contracts.run_options import RunOptions
from mtrl.settings.verl import (
    MAX_GROUP_SIZE,
    MAX_LORA_RANK,
    MAX_SEQUENCE_LENGTH,
    MAX_STEPS,
    MIN_SEQUENCE_LENGTH,
)


class VerlRunOptions(RunOptions):
    """verl GRPO per-run options; each is optional and defaults to the deployment's ``verl_*`` setting."""

    model: str | None = Field(None, min_length=1, max_length=200, description="A model id of verl_models.")
    lora_rank: int | None = Field(None, ge=0, le=MAX_LORA_RANK, description="LoRA rank (0 = full fine-tuning).")
    group_size: int | None = Field(None, ge=2, le=MAX_GROUP_SIZE, description="GRPO rollouts per prompt.")
    steps: int | None = Field(None, ge=1, le=MAX_STEPS, description="Training steps.")
    max_prompt_length: int | None = Field(None, ge=MIN_SEQUENCE_LENGTH, le=MAX_SEQUENCE_LENGTH)
    max_response_length: int | None = Field(None, ge=MIN_SEQUENCE_LENGTH, le=MAX_SEQUENCE_LENGTH)
