"""`mtrl sandbox run PROGRAM.py [--tests TESTS.py]`: run untrusted code the way rewards run it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mtrl.cli.lazy import HELP_MARKUP
from mtrl.cli.output import EXIT_INVALID, EXIT_OK, console, fail, print_json
from mtrl.sandbox import Limits, SandboxUnavailableError, run_code

app = typer.Typer(
    help="Run untrusted Python in the sandbox used for generated code.",
    no_args_is_help=True,
    rich_markup_mode=HELP_MARKUP,
)


def _read(path: Path, what: str, as_json: bool) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        fail(f"{what} '{path}' not found", as_json=as_json)
    except (OSError, UnicodeDecodeError) as error:
        fail(f"{what} '{path}' cannot be read: {error}", as_json=as_json)


@app.command("run")
def run(
    program: Annotated[Path, typer.Argument(help="The Python program to run (imported as module `solution`).")],
    tests: Annotated[
        Path | None,
        typer.Option(help="A file of test_* functions run against the program; they may use same(actual, expected)."),
    ] = None,
    timeout: Annotated[float, typer.Option(help="Wall-clock limit in seconds.", min=0.1)] = 10.0,
    memory_mb: Annotated[int, typer.Option(help="Address-space limit in MiB.", min=32)] = 512,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Run PROGRAM (and TESTS) with no credentials, no network and resource limits; exit 0 only on a pass."""
    source = _read(program, "program", as_json)
    test_source = _read(tests, "tests", as_json) if tests is not None else None
    limits = Limits(timeout_s=timeout, cpu_s=max(1, int(timeout)), memory_mb=memory_mb)
    try:
        result = run_code(source, test_source, limits)
    except SandboxUnavailableError as error:
        fail(str(error), as_json=as_json)
    except ValueError as error:
        fail(str(error), as_json=as_json)
    code = EXIT_OK if result.status == "passed" else EXIT_INVALID
    if as_json:
        print_json(result.to_dict())
        raise typer.Exit(code)
    colour = "green" if result.status == "passed" else "red"
    console.print(f"[bold {colour}]{result.status}[/] in {result.duration_s * 1000:.0f} ms", highlight=False)
    if test_source is not None:
        console.print(f"tests: {result.tests_passed}/{result.tests_total} passed", highlight=False)
    for name, reason in result.failures.items():
        console.print(f"  [red]✗ {name}[/]: {reason}", highlight=False, markup=True)
    if result.detail:
        console.print(result.detail, highlight=False, markup=False)
    for stream, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        if text:
            console.rule(stream)
            console.print(text, highlight=False, markup=False, end="" if text.endswith("\n") else "\n")
    if result.output_truncated:
        console.print(f"[yellow]output truncated at {limits.max_output_bytes} bytes per stream[/]")
    raise typer.Exit(code)
