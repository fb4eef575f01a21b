"""Building blocks shared by every settings group: strict models and readable errors."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class SettingsGroup(BaseModel):
    """A group of deploy-time settings. Unknown keys, wrong types and coercion surprises are errors.

    Groups are mixed into one model, so validator method names must be unique across all groups
    (a same-named validator in another group would silently replace this one).
    """

    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_default=True, use_attribute_docstrings=False, defer_build=True
    )


class SettingsError(ValueError):
    """Raised when configuration is invalid. The message names every offending key."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(self.render())

    def render(self) -> str:
        if len(self.problems) == 1:
            return f"invalid configuration: {self.problems[0]}"
        lines = "\n".join(f"  - {p}" for p in self.problems)
        return f"invalid configuration ({len(self.problems)} problems):\n{lines}"
