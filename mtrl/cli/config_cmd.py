"""`mtrl config`: show the effective deploy configuration, render its reference."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from mtrl.cli.lazy import HELP_MARKUP
from mtrl.cli.output import console, error_console, fail, print_json
from mtrl.envs import custom_environment_problems
from mtrl.settings import SettingsError, eks_support, load_settings, parse_overrides, read_cdk_json_context
from mtrl.settings.deploy import DeploySettings, settings_keys_from_context
from mtrl.settings.docs import render_configuration_reference

app = typer.Typer(help="Inspect the deploy-time configuration.", no_args_is_help=True, rich_markup_mode=HELP_MARKUP)


@app.command("show")
def show(
    context: Annotated[
        list[str] | None,
        typer.Option("-c", "--context", help="Override a setting, as with `cdk synth -c key=value` (repeatable)."),
    ] = None,
    cdk_json: Annotated[Path, typer.Option(help="The cdk.json whose context block holds the settings.")] = Path(
        "cdk.json"
    ),
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Print the effective settings after defaults, cdk.json and -c overrides (or a clear error)."""
    try:
        base = read_cdk_json_context(cdk_json)
        overrides = parse_overrides(context or [])
        settings = load_settings({**base, **overrides}, environ=os.environ)
        # The same package check synth runs, so a bad custom_env_id is refused here too, not first at synth.
        problems = custom_environment_problems(settings.use_custom_env, settings.custom_env_id)
        if problems:
            raise SettingsError(problems)
    except SettingsError as error:
        fail(str(error), as_json=as_json)
    # The same warning synth prints (on stderr, so --json output stays one JSON document).
    warning = (
        None if settings.emulator else eks_support.kubernetes_support_warning(settings, today=eks_support.utc_today())
    )
    if warning:
        error_console.print(f"[bold yellow]warning:[/] {warning}", highlight=False, soft_wrap=True)
    values = settings.model_dump(mode="json")
    if as_json:
        print_json(values)
        return
    explicit = settings_keys_from_context(base)
    table = Table(title=f"mtrl settings ({cdk_json})", show_lines=False)
    for column in ("setting", "value", "source", "description"):
        table.add_column(column, overflow="fold")
    for name, field in DeploySettings.model_fields.items():
        table.add_row(name, _show(values[name]), _source(name, explicit, overrides), field.description or "")
    console.print(table)


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
    typer.echo(render_configuration_reference(), nl=False)
