"""Shared output helpers: every command prints for people by default and JSON with --json."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn, cast

import typer

if TYPE_CHECKING:
    from rich.console import Console

# Output piped to a file or another program is at most 120 columns (tables wrap their cells; messages are printed
# whole with soft wrapping, so a run's URI or a failure's cause survives intact in a log). A terminal (or an
# explicit COLUMNS) keeps its own width.
PIPED_WIDTH = 120


def _width(stream: Any) -> int | None:
    if os.environ.get("COLUMNS") or (hasattr(stream, "isatty") and stream.isatty()):
        return None
    return PIPED_WIDTH


class _DeferredConsole:
    """A rich ``Console`` made on first use: importing rich is a good part of every `mtrl` start, and a command that
    prints JSON never needs it."""

    def __init__(self, **options: Any) -> None:
        object.__setattr__(self, "_options", options)
        object.__setattr__(self, "_console", None)

    def _real(self) -> Any:
        made = object.__getattribute__(self, "_console")
        if made is None:
            from rich.console import Console  # noqa: PLC0415 - the point of this class

            options = object.__getattribute__(self, "_options")
            made = Console(width=_width(sys.stderr if options.get("stderr") else sys.stdout), **options)
            object.__setattr__(self, "_console", made)
        return made

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._real(), name, value)

    def __enter__(self) -> Any:  # (special methods are looked up on the type, not through __getattr__)
        return self._real().__enter__()

    def __exit__(self, *exc_info: object) -> None:
        self._real().__exit__(*exc_info)


console = cast("Console", _DeferredConsole())
error_console = cast("Console", _DeferredConsole(stderr=True))

# Exit codes scripts can rely on.
EXIT_OK = 0
EXIT_INVALID = 1  # the thing checked is invalid (dataset, run failed, ...)
EXIT_USAGE = 2  # bad arguments or configuration


def print_json(document: Any) -> None:
    """Standard JSON only: a non-finite number (whatever computed it) is written as null, never NaN or Infinity."""
    from mtrl.health.signals import standard_json  # noqa: PLC0415 - only commands that print JSON load it

    sys.stdout.write(json.dumps(standard_json(document), indent=2, sort_keys=True, default=str, allow_nan=False) + "\n")


def fail(message: str, *, code: int = EXIT_USAGE, as_json: bool = False) -> NoReturn:
    if as_json:
        print_json({"error": message})
    else:
        # The message is text, not markup: a pattern such as '^[a-z0-9-]{1,18}$' must print as it is.
        error_console.print("[bold red]error:[/]", _escape(message), highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _escape(text: str) -> str:
    from rich.markup import escape  # noqa: PLC0415 - rich loads with the first console use anyway

    return escape(text)
