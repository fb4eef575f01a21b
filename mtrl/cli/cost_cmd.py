"""`mtrl cost`: what a serverless run (tokens) or a HyperPod run (GPU instance-hours) costs, from prices.json; with
``--at-rest``, what the deployment costs a month while idle, priced from its synthesized templates."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from mtrl.cli.output import EXIT_USAGE, console, error_console, fail, print_json

if TYPE_CHECKING:
    from mtrl.cost import CostEstimate


def cost(  # noqa: PLR0912 (one command, four forms: the calculator, a run, sessions, the deployment at rest)
    run: Annotated[
        str | None, typer.Argument(help="A deployed run's id: price it from its run record instead.")
    ] = None,
    *,
    region: Annotated[
        str | None,
        typer.Option("--region", help="AWS region the run uses (prices differ per region; default: the settings')."),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="Serverless base model id (e.g. openai-reasoning-gpt-oss-20b).")
    ] = None,
    prefill_tokens: Annotated[int, typer.Option("--prefill-tokens", min=0, help="Billable prefill tokens.")] = 0,
    sample_tokens: Annotated[int, typer.Option("--sample-tokens", min=0, help="Billable sample tokens.")] = 0,
    train_tokens: Annotated[int, typer.Option("--train-tokens", min=0, help="Billable train tokens.")] = 0,
    instance_type: Annotated[
        str | None, typer.Option("--instance-type", help="HyperPod GPU instance type (e.g. ml.p5.48xlarge).")
    ] = None,
    instances: Annotated[int, typer.Option("--instances", min=0, help="GPU instances held.")] = 0,
    hours: Annotated[float, typer.Option("--hours", min=0.0, help="Hours the instances were held.")] = 0.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    prefix: Annotated[str, typer.Option("--prefix", help="With RUN: the deployment prefix.")] = "mtrl",
    profile: Annotated[str | None, typer.Option("--profile", help="With RUN: the AWS profile.")] = None,
    endpoint_url: Annotated[
        str | None, typer.Option("--endpoint-url", help="With RUN: send AWS calls here (e.g. the emulator).")
    ] = None,
    sessions: Annotated[
        bool,
        typer.Option(
            "--sessions",
            help="Price the token counts as a SageMaker training-sessions run and show its break-even against verl "
            "on the deployment's GPU group (--instance-type/--instances override the group, --hours the verl run "
            "length).",
        ),
    ] = False,
    at_rest: Annotated[
        bool,
        typer.Option(
            "--at-rest",
            help="The deployment's monthly cost while no run is active, resource by resource, from its templates "
            "(synthesized offline from cdk.json and -c overrides).",
        ),
    ] = False,
    context: Annotated[
        list[str] | None,
        typer.Option("-c", "--context", help="With --at-rest: override a setting, as `cdk synth -c key=value`."),
    ] = None,
    cdk_json: Annotated[Path, typer.Option("--cdk-json", help="With --at-rest: the cdk.json next to the app.")] = Path(
        "cdk.json"
    ),
    templates: Annotated[
        Path | None,
        typer.Option("--templates", help="With --at-rest: price the templates of this cdk.out instead of a synth."),
    ] = None,
) -> None:
    """Estimate a run's cost from token counts (--model …) and/or GPU instance-hours (--instance-type …),
    or, given RUN, show a deployed run's cost breakdown from its run record, or, with --at-rest,
    the deployment's monthly cost at rest."""
    # The price book's models load here, so `mtrl cost --help` starts fast; the AWS side only for a RUN.
    from mtrl.cost import (  # noqa: PLC0415
        CostError,
        CostEstimate,
        TokenUsage,
        hyperpod_cost_for_hours,
        load_price_book,
        serverless_cost,
    )

    if at_rest:
        if run is not None or model is not None or instance_type is not None:
            fail("--at-rest prices the deployment: give no RUN, --model or --instance-type", as_json=as_json)
        from mtrl.cli.at_rest_cost import show_at_rest_cost  # noqa: PLC0415

        show_at_rest_cost(
            overrides=context or [],
            cdk_json=cdk_json,
            region=region,
            templates_dir=templates,
            as_json=as_json,
            print_table=_print_table,
        )
        return
    if sessions:
        if run is not None or model is not None:
            fail("--sessions prices token counts: give no RUN or --model", as_json=as_json)
        from mtrl.cli.break_even_cmd import show_break_even  # noqa: PLC0415
        from mtrl.cost import TokenUsage  # noqa: PLC0415

        show_break_even(
            region=region,
            tokens=TokenUsage(prefill=prefill_tokens, sample=sample_tokens, train=train_tokens),
            instance_type=instance_type,
            instances=instances,
            hours=hours,
            cdk_json=cdk_json,
            as_json=as_json,
        )
        return
    if context or templates is not None:
        fail("-c and --templates go with --at-rest", as_json=as_json)
    if run is not None:
        if model is not None or instance_type is not None:
            fail("give either RUN or --model/--instance-type, not both", as_json=as_json)
        # botocore and the run-table client: about 90M instructions (~20 ms) an estimate does without (issue 38).
        from mtrl.cli.run_cost import show_run_cost  # noqa: PLC0415

        show_run_cost(
            run,
            prefix=prefix,
            region=region,
            profile=profile,
            endpoint_url=endpoint_url,
            as_json=as_json,
            print_table=_print_table,
        )
        return
    if region is None:
        region = _settings_region(as_json=as_json)
    token_flags = prefill_tokens or sample_tokens or train_tokens
    if model is None and instance_type is None:
        fail("give --model (serverless token usage) and/or --instance-type (HyperPod instance-hours)", as_json=as_json)
    if model is None and token_flags:
        fail("token counts need --model", as_json=as_json)
    if instance_type is None and (instances or hours):
        fail("--instances/--hours need --instance-type", as_json=as_json)
    try:
        book = load_price_book()
        estimate = CostEstimate(book.currency, ())
        if model is not None:
            usage = TokenUsage(prefill=prefill_tokens, sample=sample_tokens, train=train_tokens)
            estimate = estimate + serverless_cost(book, model=model, region=region, usage=usage)
        if instance_type is not None:
            estimate = estimate + hyperpod_cost_for_hours(
                book, region=region, instance_type=instance_type, instances=instances, hours=hours
            )
    except CostError as error:
        fail(str(error), code=EXIT_USAGE, as_json=as_json)
    if as_json:
        print_json(estimate.to_dict())
        return
    _print_table(estimate)


def _settings_region(*, as_json: bool, cdk_json: Path = Path("cdk.json")) -> str:
    """The deployment's region from its settings (cdk.json context, CDK_DEFAULT_REGION), as `cdk deploy` uses it."""
    from mtrl.settings import SettingsError, load_settings, read_cdk_json_context  # noqa: PLC0415

    try:
        context = read_cdk_json_context(cdk_json) if cdk_json.is_file() else {}
        settings = load_settings(context, environ=os.environ)
    except SettingsError as error:
        fail(f"give --region (the settings have no usable region: {error})", as_json=as_json)
    return str(settings.region)


def _print_table(estimate: CostEstimate) -> None:
    table = Table(title=f"estimated cost ({estimate.currency})")
    for column in ("item", "quantity", "unit price", "amount"):
        table.add_column(column, justify="left" if column == "item" else "right")
    for line in estimate.lines:
        table.add_row(line.item, f"{line.quantity:,.2f} {line.unit}", f"{line.unit_price:,.4f}", f"{line.amount:,.2f}")
    table.add_row("total", "", "", f"{estimate.total:,.2f}", style="bold")
    console.print(table)
    for assumption in estimate.assumptions:
        error_console.print(f"[yellow]assumed price:[/] {assumption}", highlight=False)
    for note in estimate.not_included:
        console.print(f"not included: {note}", highlight=False)
