"""Shared output helpers: every command prints for people by default and JSON with --json."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer
from rich.console import Console

console = Console()
error_console = Console(stderr=True)

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
