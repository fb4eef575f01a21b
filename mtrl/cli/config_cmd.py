"""`mtrl config`: show the effective deploy configuration, render its reference."""

from __future__ import annotations

import difflib
import fnmatch
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.cells import cell_len
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from mtrl.cli.lazy import HELP_MARKUP
from mtrl.cli.output import console, error_console, fail, print_json
from mtrl.envs import deployment_environment_problems
from mtrl.settings import SettingsError, eks_support, load_settings, parse_overrides, read_cdk_json_context
from mtrl.settings.deploy import DeploySettings, settings_keys_from_context

app = typer.Typer(help="Inspect the deploy-time configuration.", no_args_is_help=True, rich_markup_mode=HELP_MARKUP)


@app.command("show")
def show(
    pattern: Annotated[
        str | None,
        typer.Argument(
            help="Show only the settings whose name contains PATTERN, or matches it as a glob (verl_*, *_minutes)."
        ),
    ] = None,
    *,
    context: Annotated[
        list[str] | None,
        typer.Option("-c", "--context", help="Override a setting, as with `cdk synth -c key=value` (repeatable)."),
    ] = None,
    cdk_json: Annotated[Path, typer.Option(help="The cdk.json whose context block holds the settings.")] = Path(
        "cdk.json"
    ),
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Print the effective settings after defaults, cdk.json and -c overrides, and where each value came from
    (or a clear error). With --json: {setting: {"value": …, "source": …}}."""
    try:
        base = read_cdk_json_context(cdk_json)
        overrides = parse_overrides(context or [])
        settings = load_settings({**base, **overrides}, environ=os.environ)
        # The same checks synth runs, so a bad custom_env_id or run_environment is refused here too, not first at synth.
        problems = deployment_environment_problems(
            run_environment=settings.run_environment,
            use_custom_env=settings.use_custom_env,
            custom_env_id=settings.custom_env_id,
        )
        if problems:
            raise SettingsError(problems)
    except SettingsError as error:
        fail(str(error), as_json=as_json)
    # The same warning synth prints (on stderr, so --json output stays one JSON document).
    warning = (
        None if settings.emulator else eks_support.kubernetes_support_warning(settings, today=eks_support.utc_today())
    )
    # A public EKS endpoint open to every address (eks_endpoint_access), as synth warns.
    endpoint = None if settings.emulator or not settings.deploy_cluster else settings.public_endpoint_warning()
    # What the default backend still lacks (an image, a model), naming the command that supplies it.
    for text in (warning, endpoint, settings.default_backend_warning()):
        if text:
            error_console.print(f"[bold yellow]warning:[/] {escape(text)}", highlight=False, soft_wrap=True)
    values = settings.model_dump(mode="json")
    names = _matching(pattern, as_json=as_json)
    explicit = settings_keys_from_context(base)
    if as_json:
        print_json({name: {"value": values[name], "source": _source(name, explicit, overrides)} for name in names})
        return
    shown = "" if pattern is None else f", matching '{pattern}'"
    rows = [
        (name, _show(values[name]), _source(name, explicit, overrides), DeploySettings.model_fields[name].description)
        for name in names
    ]
    table = Table(title=f"mtrl settings ({cdk_json}{shown})", show_lines=False)
    for column, width in zip(COLUMNS, _column_widths(rows, console.width), strict=True):
        table.add_column(column, overflow="fold", width=width)
    for row in rows:
        # Text, not markup: brackets in a value or description (such as '[a-z]') print as they are, and rich parses
        # no markup in some 400 cells.
        table.add_row(*(Text(cell or "") for cell in row))
    console.print(table)


COLUMNS = ("setting", "value", "source", "description")
# What a table of four columns adds to its cells' widths: five borders and one space either side of each cell.
_TABLE_FRAME = 5 + 4 * 2


def _column_widths(rows: list[tuple[str, str, str, str | None]], total: int) -> list[int | None]:
    """Widths of the four columns for a table ``total`` cells wide: names and sources whole, the rest shared by value
    and description (the longer of them folded first). Rich would measure every cell twice to find about the same
    (issue 38: that was a fifth of `mtrl config show`'s start-up); None (rich lays the table out) where it is narrow.
    """
    longest = [max((cell_len(row[index] or "") for row in rows), default=0) for index in range(4)]
    name, value, source, description = (max(width, len(column)) for width, column in zip(longest, COLUMNS, strict=True))
    free = total - _TABLE_FRAME - name - source
    if free < 40:
        return [None] * 4
    if value + description > free:
        value = min(value, max(free // 2, free - description))
        description = free - value
    return [name, value, source, description]


def _matching(pattern: str | None, *, as_json: bool) -> list[str]:
    """The setting names PATTERN selects (all without one): a glob when it has *, ? or [, else a substring."""
    names = list(DeploySettings.model_fields)
    if pattern is None:
        return names
    wanted = pattern.lower()
    is_glob = any(char in wanted for char in "*?[")
    found = [name for name in names if (fnmatch.fnmatchcase(name, wanted) if is_glob else wanted in name)]
    if not found:
        close = difflib.get_close_matches(wanted, names, n=3)
        hint = f" (did you mean {', '.join(repr(name) for name in close)}?)" if close else ""
        fail(f"no setting matches '{pattern}'{hint}; `mtrl config show` lists them all", as_json=as_json)
    return found


def _source(name: str, from_file: dict[str, Any], overrides: dict[str, str]) -> str:
    if name in overrides:
        return "-c override"
    if name in from_file:
        return "cdk.json"
    if name in {"account", "region"} and os.environ.get(f"CDK_DEFAULT_{name.upper()}"):
        return "environment"
    return "default"


def _show(value: Any) -> str:
    return "—" if value is None or value == [] else str(value)


@app.command("docs")
def docs() -> None:
    """Print the configuration reference (Markdown) generated from the settings model."""
    from mtrl.settings.docs import render_configuration_reference  # noqa: PLC0415 - only this command needs it

    typer.echo(render_configuration_reference(), nl=False)
