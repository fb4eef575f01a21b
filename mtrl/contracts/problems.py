"""Pydantic's validation errors as one readable line per problem, each naming its dotted key.

Deploy-time settings and a manifest's per-run options both report their problems this way.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

from pydantic import ValidationError

_NAMED_MESSAGE = re.compile(r"^(?P<key>[a-z][a-z0-9_]*): (?P<why>.*)$", re.DOTALL)


def problems_from_validation_error(
    error: ValidationError, *, root: str = "", known_keys: Iterable[str] = ()
) -> list[str]:
    """Turn pydantic's error list into one line per problem, each naming the dotted key. An unknown key close to
    one of ``known_keys`` (the model's fields) gets a "did you mean"."""
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
            close = difflib.get_close_matches(str(item["loc"][-1]), list(known_keys), n=1) if item["loc"] else []
            message = "unknown setting" + (f" (did you mean '{close[0]}'?)" if close else "")
        given = item.get("input")
        # A validator that quotes the value itself ("must be … (got 'x')") is not followed by a second "(got …)".
        quiet = (
            item["type"] in {"extra_forbidden", "missing"}
            or isinstance(given, dict)
            or not location
            or "(got " in message
        )
        shown = "" if quiet else f" (got {given!r})"
        problems.append(f"setting '{key}': {message}{shown}")
    return problems
