"""The `mtrl` command. Each command group lives in its own module, imported only when the command runs.

`mtrl` starts in a fraction of a second whatever the command: the table below names each command's function (or
Typer app) and its one-line help, so listing the commands imports none of them (``mtrl.cli.lazy``);
tests/unit/cli/test_cli_startup.py keeps the help lines equal to the commands' own and the heavy libraries out of
the start-up.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
import typer.core

import mtrl
from mtrl.cli.lazy import LazyCommand


def _commands() -> list[LazyCommand]:
    """Every `mtrl` command, in the order `mtrl --help` lists them (commands, then groups)."""
    return [
        LazyCommand(
            "cost",
            "mtrl.cli.cost_cmd:cost",
            "Estimate a run's cost from token counts (--model …) and/or GPU instance-hours (--instance-type …),\n"
            "or, given RUN, show a deployed run's cost breakdown from its run record, or, with --at-rest,\n"
            "the deployment's monthly cost at rest.",
        ),
        LazyCommand(
            "eval",
            "mtrl.cli.eval_cmd:evaluate",
            "Evaluate one or more policies on a split, side by side: the external evaluation, reward, success, turns.",
        ),
        LazyCommand(
            "health",
            "mtrl.cli.health_cmd:health",
            "Evaluate the training-health rules on a signals.jsonl: per rule its level over the steps, where it "
            "fired,\nand the verdict (ok, warn, stop or incomplete).",
        ),
        LazyCommand(
            "validate",
            "mtrl.cli.validate_cmd:validate",
            "Validate a dataset exactly as the pipeline's Validate step does (same limits as the defaults).",
        ),
        LazyCommand(
            "submit",
            "mtrl.cli.submit_cmd:submit",
            "Start a training run: validate FILE locally (the pipeline's validator, with the manifest's environment\n"
            "and eval split), refuse it with line-numbered errors if invalid (exit 1, nothing uploaded), else upload\n"
            "the manifest and then the dataset and print the run id.",
        ),
        LazyCommand("runs", "mtrl.cli.runs_cmd:runs", "List runs, newest first (from the run table's listing index)."),
        LazyCommand(
            "status", "mtrl.cli.runs_cmd:status", "Show a run: phase, timings, progress, reward mean, cost so far."
        ),
        LazyCommand(
            "logs",
            "mtrl.cli.runs_cmd:logs",
            "Print the CloudWatch Logs lines of the pipeline's functions and state machine that mention the run.",
        ),
        LazyCommand(
            "cancel", "mtrl.cli.runs_cmd:cancel", "Cancel a run: stop its Step Functions execution (StopExecution)."
        ),
        LazyCommand(
            "demo",
            "mtrl.cli.demo.command:demo",
            "Deploy the real pipeline into an embedded AWS emulator, train on the sample dataset, reject a bad one.",
        ),
        LazyCommand(
            "render",
            "mtrl.cli.render_cmd:render",
            "Print, offline, the Kubernetes objects a run of MANIFEST would submit (as `helm template` does).",
        ),
        LazyCommand("config", "mtrl.cli.config_cmd:app", "Inspect the deploy-time configuration."),
        LazyCommand(
            "image", "mtrl.cli.image_cmd:app", "The trainer image: build it in the account, list what is registered."
        ),
        LazyCommand(
            "model", "mtrl.cli.model_cmd:app", "Model copies verl runs train: import one, list what is registered."
        ),
        LazyCommand(
            "env",
            "mtrl.cli.env_cmd:app",
            "Reward environments: list them, play an episode by hand, try one locally.",
            # `mtrl env try` (local GRPO dry run, the language-model policies) has its own module and libraries.
            subcommands=[
                LazyCommand(
                    "try",
                    "mtrl.cli.env_try:try_environment",
                    "Dry-run an environment's reward with a policy and report its signal health and held-out success.",
                )
            ],
        ),
        LazyCommand(
            "sandbox", "mtrl.cli.sandbox_cmd:app", "Run untrusted Python in the sandbox used for generated code."
        ),
    ]


class _Commands(typer.core.TyperGroup):
    """The `mtrl` group, holding every command as a ``LazyCommand``."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for command in _commands():
            self.add_command(command)


app = typer.Typer(
    name="mtrl",
    cls=_Commands,
    help="Multi-turn RL training on AWS: configure, validate, submit and follow training runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"mtrl {mtrl.__version__}")
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
