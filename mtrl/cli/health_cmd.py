"""`mtrl health FILE [--json]`: the training-health rules on a run's ``signals.jsonl``, offline.

The same code the pipeline's status poll runs (``mtrl.health.rules.evaluate``): per rule, its level over the
steps and where it fired, and the run's verdict. By default the file is taken as a finished run's (so a run that
ended below its planned steps is ``incomplete``); ``--running`` judges it as a run still going (``stalled`` is
measured against the current time instead).

Exit code 0 when the verdict is ok, 1 when it is warn, stop or incomplete, 2 when the file cannot be read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from mtrl.cli.output import EXIT_INVALID, EXIT_OK, EXIT_USAGE, console, fail, print_json

FileArgument = Annotated[Path, typer.Argument(help="A signals.jsonl file (runs/<run id>/signals.jsonl).")]


def segments_text(segments: list[dict[str, Any]]) -> str:
    """``1-5 warm-up, 6-7 ok, 8-100 stop``."""
    parts = []
    for segment in segments:
        span = str(segment["from"]) if segment["from"] == segment["to"] else f"{segment['from']}-{segment['to']}"
        parts.append(f"{span} {segment['level']}")
    return ", ".join(parts) or "-"


def _figure(value: Any) -> str:
    return "-" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


def render(document: dict[str, Any]) -> Any:
    from rich.console import Group  # noqa: PLC0415 - the CLI starts fast; Rich's tables only when printing
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    styles = {"ok": "green", "warn": "yellow", "stop": "red", "incomplete": "red"}
    table = Table(title="rules", title_justify="left")
    for column in ("rule", "now", "worst", "last value", "fired at step", "levels over the steps"):
        table.add_column(column)
    for name, entry in document["rules"].items():
        fired = [str(item["step"]) + f" ({item['level']})" for item in document["fired"] if item["rule"] == name]
        table.add_row(
            name,
            Text(entry["level"], style=styles.get(entry["level"], "")),
            Text(entry["worst"], style=styles.get(entry["worst"], "")),
            _figure(entry.get("value")),
            ", ".join(fired) or "-",
            segments_text(entry.get("segments") or []),
        )
    verdict = document["verdict"]
    head = Text.assemble(
        "verdict: ",
        (verdict, f"bold {styles.get(verdict, '')}"),
        f"  ({document['last_step']}/{document['planned_steps']} steps, warm-up {document['warmup_steps']}, "
        f"window {document['window_steps']})",
    )
    lines: list[Any] = [head]
    for item in document["fired"]:
        lines.append(
            f"  {item['rule']} → {item['level']} at step {item['step']}: value {_figure(item['value'])}, "
            f"threshold {_figure(item['threshold'])}"
        )
    if document.get("truncated_tail"):
        lines.append("  (the file's last line was partially written and was left out)")
    return Group(*lines, table)


def health(
    file: FileArgument,
    *,
    running: Annotated[
        bool, typer.Option("--running", help="Judge the file as a run still going (stalled, not incomplete).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdict document as JSON.")] = False,
) -> None:
    """Evaluate the training-health rules on a signals.jsonl: per rule its level over the steps, where it fired,
    and the verdict (ok, warn, stop or incomplete)."""
    from datetime import UTC, datetime  # noqa: PLC0415

    from mtrl.health.rules import OK, evaluate  # noqa: PLC0415
    from mtrl.health.signals import SignalsError, parse_signals  # noqa: PLC0415

    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        fail(f"cannot read {file}: {error}", code=EXIT_USAGE, as_json=as_json)
    try:
        signals = parse_signals(text, source=str(file))
    except SignalsError as error:
        fail(str(error), code=EXIT_USAGE, as_json=as_json)
    document = evaluate(signals, now=datetime.now(UTC) if running else None, ended=not running)
    if as_json:
        print_json(document)
    else:
        console.print(render(document))
    raise typer.Exit(EXIT_OK if document["verdict"] == OK else EXIT_INVALID)
