"""Reward-environment settings: which environment package the reward workers run."""

from __future__ import annotations

import re
from typing import Self

from pydantic import Field, model_validator

from mtrl.settings.base import SettingsGroup

# Same rule as mtrl.envs.registry.ENV_ID_PATTERN (kept here so settings import nothing heavy).
ENV_ID_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_ENV_ID = ENV_ID_PATTERN


class EnvironmentSettings(SettingsGroup):
    """Reward environments: the built-in ones (wordle, ask_to_code, sop_support) or your own package."""

    use_custom_env: bool = Field(
        False,
        description="Use your own reward environment from custom-environments/<custom_env_id>/ instead of the "
        "built-in ones; it is checked at synth (importable, has load_environment, passes a one-episode smoke run).",
    )
    custom_env_id: str | None = Field(
        None,
        description="Directory name of the custom environment under custom-environments/ (lowercase letters, "
        "digits and '_'); required when use_custom_env is true.",
    )

    @model_validator(mode="after")
    def _custom_env_named(self) -> Self:
        if self.custom_env_id is not None and not _ENV_ID.match(self.custom_env_id):
            raise ValueError(
                "custom_env_id: must be lowercase letters, digits and '_', starting with a letter (max 64)"
            )
        if self.use_custom_env and self.custom_env_id is None:
            raise ValueError("custom_env_id: required when use_custom_env is true")
        return self
