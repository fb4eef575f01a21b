"""`mtrl demo`: the offline end-to-end demo (see mtrl/demo.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mtrl.cli.output import EXIT_INVALID, console, fail
from mtrl.demo import DemoError, run_demo
from mtrl.emulator import EmulatorError


def demo(
    work_dir: Annotated[
        Path, typer.Option(help="Where the demo keeps its synthesized app, logs and the run's plot.")
    ] = Path(".build/demo"),
) -> None:
    """Deploy the real pipeline into an embedded AWS emulator, train on the sample dataset, reject a bad one."""
    try:
        result = run_demo(work_dir=work_dir.resolve(), console=console)
    except (DemoError, EmulatorError) as error:
        fail(str(error), code=EXIT_INVALID)
    if not result.ok:
        raise typer.Exit(EXIT_INVALID)
