"""`mtrl cost RUN`: a deployed run's cost breakdown, priced from its run record by ``mtrl.cost``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mtrl.cli.output import EXIT_INVALID, console, fail, print_json
from mtrl.cli.remote import connect, remote_errors
from mtrl.client import runs as client_runs
from mtrl.cost import CostError, CostEstimate


def show_run_cost(
    run_id: str,
    *,
    prefix: str,
    region: str | None,
    profile: str | None,
    endpoint_url: str | None,
    as_json: bool,
    print_table: Callable[[CostEstimate], None],
) -> None:
    connection = connect(prefix=prefix, region=region, profile=profile, endpoint_url=endpoint_url, as_json=as_json)
    with remote_errors(connection.aws, as_json=as_json):
        record = connection.registry().get(run_id)
    settings = record.get("settings") or {}
    recorded = (record.get("cost") or {}).get("usd")
    try:
        estimate = client_runs.run_cost(record, region=connection.deployment.region)
    except CostError as error:
        if settings.get("backend") == "sessions":
            _show_sessions_tokens(run_id, record, region=connection.deployment.region, as_json=as_json)
            return
        fail(f"run {run_id}: cannot price it: {error}", code=EXIT_INVALID, as_json=as_json)
    if as_json:
        document: dict[str, Any] = {
            "run_id": run_id,
            "status": record["status"],
            "backend": settings.get("backend"),
            "recorded_cost_usd": recorded,
            **estimate.to_dict(),
        }
        print_json(document)
        return
    console.print(f"run {run_id} ({record['status']}, backend {settings.get('backend') or '-'})", highlight=False)
    print_table(estimate)  # the same table as the calculator form of `mtrl cost`
    if recorded is not None:
        console.print(f"cost the pipeline recorded at its last status poll: ${recorded:,.2f}", highlight=False)


def _show_sessions_tokens(run_id: str, record: dict[str, Any], *, region: str, as_json: bool) -> None:
    """A sessions run whose tokens have no price: its token counts and the break-even against verl, never a made-up
    cost (issue 37, item 5)."""
    from mtrl.backends.sessions.cost import usage_from_record  # noqa: PLC0415
    from mtrl.cli.break_even_cmd import print_break_even, sessions_break_even  # noqa: PLC0415
    from mtrl.cost import TokenUsage  # noqa: PLC0415
    from mtrl.settings import SettingsError  # noqa: PLC0415

    tokens = TokenUsage.from_billable(usage_from_record(record)["token_usage"])
    try:
        result = sessions_break_even(region=region, tokens=tokens)
    except (CostError, SettingsError) as error:
        fail(f"run {run_id}: cannot price it or compare it with verl: {error}", code=EXIT_INVALID, as_json=as_json)
    if as_json:
        print_json({"run_id": run_id, "status": record["status"], "backend": "sessions", **result.to_dict()})
        return
    console.print(f"run {run_id} ({record['status']}, backend sessions)", highlight=False)
    print_break_even(result)
