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
    from rich.console import Console

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
    sibling = file.with_name("eval.jsonl")
    if eval_file is None and eval_split == 0 and file.name == "train.jsonl" and sibling.is_file():
        # An environment's sample pair (sample/train.jsonl + sample/eval.jsonl): a run of them is refused on any
        # overlap, so check it here too.
        eval_file = sibling
        if not as_json:
            error_console.print(f"checking overlap with {sibling} (--eval-file to choose another)", highlight=False)
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
        # The report is the command's output: on stdout, so `mtrl validate FILE | head` shows it.
        for item in (eval_report, report):
            if item is not None:
                print_report(item, to=console)
    if not valid:
        raise typer.Exit(EXIT_INVALID)


def dataset_pair_problems(train: Path, held_out: Path, *, environment: str) -> list[str]:
    """What the pipeline's Validate refuses of a training file with its evaluation file (a row in both included),
    one line each, as `mtrl validate TRAIN --eval-file EVAL` lists them; `mtrl env check` and `env try` run it on
    the pair they use."""
    report, eval_report = validate_file(train, environment=environment, eval_path=held_out)
    return [
        f"{item.source}:{issue.render()}" for item in (eval_report, report) if item is not None for issue in item.errors
    ]


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


def print_report(report: ValidationReport, *, to: Console) -> None:
    """A validation report for people: the summary line, then each error with its line number."""
    if report.valid:
        # summary() already says "valid": "FILE: valid (200 rows, …)".
        to.print(report.summary(), highlight=False, soft_wrap=True)
        return
    to.print(f"[bold red]invalid[/] {report.source}: {report.error_count} error(s)", highlight=False, soft_wrap=True)
    for issue in report.errors:
        to.print(f"  {report.source}:{issue.render()}  [dim]({issue.code})[/]", highlight=False, soft_wrap=True)
    if report.error_count > len(report.errors):
        to.print(f"  … {report.error_count - len(report.errors)} more", highlight=False, soft_wrap=True)
    if report.stopped_early:
        to.print(f"  stopped early: {report.stopped_early}", highlight=False, soft_wrap=True)
