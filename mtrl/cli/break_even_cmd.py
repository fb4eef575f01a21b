"""`mtrl cost --sessions`: a sessions run's cost from its token counts, and its break-even against the verl backend
on the deployment's GPU group (``mtrl.cost.break_even``). A per-token price without a source is said to be missing,
never invented: the break-even is then the per-token price the service would have to beat."""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path

from rich.table import Table

from mtrl.backends.pricing import cost_for_run
from mtrl.cli.output import EXIT_USAGE, console, error_console, fail, print_json
from mtrl.cost import CostError, TokenUsage, load_price_book
from mtrl.cost.break_even import DEFAULT_HOURS, BreakEven, break_even
from mtrl.settings import SettingsError, load_settings, read_cdk_json_context


def show_break_even(
    *,
    region: str | None,
    tokens: TokenUsage,
    instance_type: str | None,
    instances: int,
    hours: float,
    cdk_json: Path,
    as_json: bool,
) -> None:
    try:
        result = sessions_break_even(
            region=region,
            tokens=tokens,
            instance_type=instance_type,
            instances=instances,
            hours=hours,
            cdk_json=cdk_json,
        )
    except (CostError, SettingsError) as error:
        fail(str(error), code=EXIT_USAGE, as_json=as_json)
    if as_json:
        print_json(result.to_dict())
        return
    print_break_even(result)


def sessions_break_even(
    *,
    region: str | None,
    tokens: TokenUsage,
    instance_type: str | None = None,
    instances: int = 0,
    hours: float = 0.0,
    cdk_json: Path = Path("cdk.json"),
) -> BreakEven:
    """The break-even of a SageMaker sessions run of ``tokens`` against verl on the GPU group the settings describe
    (``instance_type``/``instances`` override it). Raises CostError or SettingsError."""
    try:
        settings = load_settings(read_cdk_json_context(cdk_json) if cdk_json.is_file() else {}, environ=os.environ)
    except SettingsError as error:
        raise SettingsError([f"the settings are invalid, so the deployment's GPU group is unknown: {error}"]) from None
    group = settings.training_instance_group
    region = region or str(settings.region)
    book = load_price_book()
    usage = {"backend": "sessions", "region": region, "service": "sagemaker", "token_usage": tokens.model_dump()}
    service_cost: Decimal | None = None
    unpriced: str | None = None
    try:
        service_cost = cost_for_run(usage, book).total
    except CostError as error:
        unpriced = str(error)
    return break_even(
        book,
        region=region,
        tokens=tokens,
        service_cost=service_cost,
        service_unpriced=unpriced,
        instance_type=instance_type or group.instance_type,
        instances=instances or settings.run_instance_count,
        verl_hours=(Decimal(str(hours)),) if hours else DEFAULT_HOURS,
    )


def print_break_even(result: BreakEven) -> None:
    tokens = result.tokens
    console.print(
        f"sessions run of {result.total_tokens:,} tokens ({tokens.prefill:,} prefill, {tokens.sample:,} sample, "
        f"{tokens.train:,} train) in {result.region}",
        highlight=False,
    )
    if result.service_cost is None:
        console.print(f"sessions cost: [bold]unpriced[/] ({result.service_unpriced})", highlight=False)
    else:
        console.print(f"sessions cost: ${result.service_cost:,.2f}", highlight=False)
    console.print(
        f"verl on the GPU group: {result.instances} × {result.instance_type} = ${result.hourly_rate:,.2f} per hour",
        highlight=False,
    )
    if result.break_even_hours is not None:
        console.print(
            f"break-even: verl is cheaper if it trains this run in under {result.break_even_hours} hours",
            highlight=False,
        )
    table = Table(title="break-even per-token price by verl run length")
    for column in ("verl hours", "verl cost", "sessions breaks even at (USD per million tokens)"):
        table.add_column(column, justify="right")
    for row in result.rows:
        table.add_row(f"{row.verl_hours}", f"{row.verl_cost:,.2f}", f"{row.break_even_per_million:,.4f}")
    console.print(table)
    if result.rate_assumed:
        error_console.print(f"[yellow]assumed price:[/] {result.instance_type}: {result.rate_assumed}", highlight=False)
