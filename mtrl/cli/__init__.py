"""The `mtrl` command. Each command group lives in its own module and is registered here."""

from __future__ import annotations

from typing import Annotated, Any

import typer
import typer.core

from mtrl import __version__
from mtrl.cli import (
    config_cmd,
    cost_cmd,
    demo_cmd,
    env_cmd,
    env_try,
    eval_cmd,
    health_cmd,
    render_cmd,
    runs_cmd,
    sandbox_cmd,
    submit_cmd,
    validate_cmd,
)

_display_type_rich = typer.core.TyperOption.display_type_rich


def _flag_has_no_value(self: typer.core.TyperOption, ctx: Any) -> str | None:
    """Typer labels on/off flags (``--json``, ``--help``, ``--version``) ``<bool>`` although they take no value."""
    return None if self.is_flag else _display_type_rich(self, ctx)


typer.core.TyperOption.display_type_rich = _flag_has_no_value  # type: ignore[method-assign]

app = typer.Typer(
    name="mtrl",
    help="Multi-turn RL training on AWS: configure, validate, submit and follow training runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(config_cmd.app, name="config")
app.command("cost")(cost_cmd.cost)
app.add_typer(env_cmd.app, name="env")
env_try.register(env_cmd.app)
app.command("eval")(eval_cmd.evaluate)
app.command("health")(health_cmd.health)
app.add_typer(sandbox_cmd.app, name="sandbox")
app.command("validate")(validate_cmd.validate)
app.command("submit")(submit_cmd.submit)
app.command("runs")(runs_cmd.runs)
app.command("status")(runs_cmd.status)
app.command("logs")(runs_cmd.logs)
app.command("cancel")(runs_cmd.cancel)
app.command("demo")(demo_cmd.demo)
app.command("render")(render_cmd.render)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"mtrl {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", help="Print the version and exit.", callback=_print_version, is_eager=True),
    ] = False,
) -> None:
    """Multi-turn RL training on AWS."""


def main() -> None:
    app()
