"""Pydantic's validation errors as one readable line per problem, each naming its dotted key.

Deploy-time settings and a manifest's per-run options both report their problems this way.
"""

from __future__ import annotations

import re

from pydantic import ValidationError

_NAMED_MESSAGE = re.compile(r"^(?P<key>[a-z][a-z0-9_]*): (?P<why>.*)$", re.DOTALL)


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
