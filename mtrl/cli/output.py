"""Shared output helpers: every command prints for people by default and JSON with --json."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, NoReturn

import typer
from rich.console import Console

# Output piped to a file or another program is not cut at 80 columns: a run's URI or a failure's cause must survive
# intact in a log. A terminal (or an explicit COLUMNS) keeps its own width.
PIPED_WIDTH = 1000


def _width(stream: Any) -> int | None:
    if os.environ.get("COLUMNS") or (hasattr(stream, "isatty") and stream.isatty()):
        return None
    return PIPED_WIDTH


console = Console(width=_width(sys.stdout))
error_console = Console(stderr=True, width=_width(sys.stderr))

# Exit codes scripts can rely on.
EXIT_OK = 0
EXIT_INVALID = 1  # the thing checked is invalid (dataset, run failed, ...)
EXIT_USAGE = 2  # bad arguments or configuration


def print_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")


def fail(message: str, *, code: int = EXIT_USAGE, as_json: bool = False) -> NoReturn:
    if as_json:
        print_json({"error": message})
    else:
        error_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)
