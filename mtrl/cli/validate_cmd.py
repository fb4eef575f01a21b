"""`mtrl validate FILE`: the pipeline's dataset validator, locally (exit 0 valid, 1 invalid, 2 usage)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mtrl.cli.output import EXIT_INVALID, console, error_console, fail, print_json
from mtrl.validation.dataset import Limits, ValidationReport
from mtrl.validation.sources import UnknownEnvironmentError, validate_file

if TYPE_CHECKING:
    from mtrl.settings.deploy import DeploySettings
    from mtrl.settings.pipeline import PipelineSettings


def validate(
    file: Annotated[Path, typer.Argument(help="The JSONL dataset to check (Nova Forge row format).")],
    *,
    env: Annotated[
        str | None,
        typer.Option(
            "--env", help="Run this environment's own row checks (default: the deployment's run_environment)."
        ),
    ] = None,
    eval_split: Annotated[
        float, typer.Option("--eval-split", min=0.0, max=0.5, help="Held-out share; checks train/eval overlap.")
    ] = 0.0,
    eval_file: Annotated[
        Path | None, typer.Option("--eval-file", help="A separate evaluation JSONL; no row may overlap it.")
    ] = None,
    max_errors: Annotated[int, typer.Option("--max-errors", min=1, help="Errors to list.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print the validation report as JSON.")] = False,
) -> None:
    """Validate a dataset exactly as the pipeline's Validate step does (same limits as the defaults)."""
    for path in (file, eval_file):
        if path is not None and not path.is_file():
            fail(f"{path}: no such file", as_json=as_json)
    if eval_file is not None and eval_split > 0:
        fail("use either --eval-split or --eval-file, not both", as_json=as_json)
    limits = Limits(max_errors=max_errors)  # the pipeline's defaults, without loading the settings models
    if env is None:  # as the pipeline does for a run without a manifest: the deployment's default environment
        env = _deployment_environment(as_json=as_json)
    try:
        report, eval_report = validate_file(
            file, environment=env, limits=limits, eval_split=eval_split, eval_path=eval_file
        )
    except UnknownEnvironmentError as error:
        fail(str(error), as_json=as_json)
    valid = report.valid and (eval_report is None or eval_report.valid)
    if as_json:
        print_json({"valid": valid, "train": report.to_dict(), "eval": eval_report.to_dict() if eval_report else None})
    else:
        for item in (eval_report, report):
            if item is not None:
                _print_human(item)
    if not valid:
        raise typer.Exit(EXIT_INVALID)


def _deployment_environment(*, as_json: bool, cdk_json: Path = Path("cdk.json")) -> str:
    environment = str(deployment_defaults(as_json=as_json, cdk_json=cdk_json).run_environment)
    if not as_json:
        error_console.print(
            f"checking rows with the deployment's default environment '{environment}' (--env to choose)",
            highlight=False,
        )
    return environment


def deployment_settings(*, as_json: bool, cdk_json: Path = Path("cdk.json")) -> DeploySettings:
    """This checkout's deployment settings (cdk.json: what `cdk deploy` deploys), or exit naming the problem."""
    # Only a check without --env/--manifest needs the deployment's settings (every settings model): imported here.
    from mtrl.settings import SettingsError, load_settings, read_cdk_json_context  # noqa: PLC0415

    try:
        context = read_cdk_json_context(cdk_json) if cdk_json.is_file() else {}
        return load_settings(context, environ=os.environ)
    except SettingsError as error:
        fail(f"give --env (the deployment settings are invalid: {error})", as_json=as_json)


def deployment_defaults(*, as_json: bool, cdk_json: Path = Path("cdk.json")) -> PipelineSettings:
    """The run settings a run without a manifest gets: this checkout's cdk.json (what `cdk deploy` deploys)."""
    from mtrl.settings.pipeline import PipelineSettings  # noqa: PLC0415

    settings = deployment_settings(as_json=as_json, cdk_json=cdk_json)
    return PipelineSettings.model_validate({name: getattr(settings, name) for name in PipelineSettings.model_fields})


def _print_human(report: ValidationReport) -> None:
    if report.valid:
        console.print(f"[green]valid[/] {report.summary()}", highlight=False, soft_wrap=True)
        return
    error_console.print(
        f"[bold red]invalid[/] {report.source}: {report.error_count} error(s)", highlight=False, soft_wrap=True
    )
    for issue in report.errors:
        error_console.print(
            f"  {report.source}:{issue.render()}  [dim]({issue.code})[/]", highlight=False, soft_wrap=True
        )
    if report.error_count > len(report.errors):
        error_console.print(f"  … {report.error_count - len(report.errors)} more", highlight=False, soft_wrap=True)
    if report.stopped_early:
        error_console.print(f"  stopped early: {report.stopped_early}", highlight=False, soft_wrap=True)
