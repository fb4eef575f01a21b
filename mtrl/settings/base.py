"""Building blocks shared by every settings group: strict models and readable errors."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, ValidationError

_NAMED_MESSAGE = re.compile(r"^(?P<key>[a-z][a-z0-9_]*): (?P<why>.*)$", re.DOTALL)


class SettingsGroup(BaseModel):
    """A group of deploy-time settings. Unknown keys, wrong types and coercion surprises are errors.

    Groups are mixed into one model, so validator method names must be unique across all groups
    (a same-named validator in another group would silently replace this one).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, use_attribute_docstrings=False)


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


def problems_from_validation_error(error: ValidationError, *, root: str = "") -> list[str]:
    """Turn pydantic's error list into one line per problem, each naming the dotted key."""
    problems: list[str] = []
    for item in error.errors(include_url=False):
        location = ".".join(str(part) for part in item["loc"] if part != "__root__")
        key = ".".join(part for part in (root, location) if part) or "(settings)"
        message = str(item["msg"]).removeprefix("Value error, ")
        # Cross-field rules name their key at the start of the message ("key: why").
        named = _NAMED_MESSAGE.match(message)
        if named and not location:
            key, message = ".".join(part for part in (root, named["key"]) if part), named["why"]
        if item["type"] == "extra_forbidden":
            message = "unknown setting"
        given = item.get("input")
        quiet = item["type"] in {"extra_forbidden", "missing"} or isinstance(given, dict) or not location
        shown = "" if quiet else f" (got {given!r})"
        problems.append(f"setting '{key}': {message}{shown}")
    return problems
