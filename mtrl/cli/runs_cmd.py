"""`mtrl runs`, `mtrl status RUN`, `mtrl logs RUN`, `mtrl cancel RUN`: follow and control deployed runs."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from typing import Annotated, Any, TypeGuard

import typer
from rich.console import Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from mtrl.cli.output import EXIT_INVALID, EXIT_OK, console, error_console, fail, print_json
from mtrl.cli.remote import (
    Connection,
    EndpointOption,
    JsonOption,
    PrefixOption,
    ProfileOption,
    RegionOption,
    connect,
    remote_errors,
)
from mtrl.client import runs as client_runs
from mtrl.health.evaluation import label as evaluation_label
from mtrl.runs.registry import RunStatus
from mtrl.runs.report import converged_at, converged_text

GENERIC_ERROR_NAMES = {"Runtime.HandlerError", "Runtime.UnhandledError", "Lambda.Unknown", "States.TaskFailed"}
RunArgument = Annotated[str, typer.Argument(help="Run id (as printed by `mtrl submit`, listed by `mtrl runs`).")]
IntervalOption = Annotated[
    float, typer.Option("--interval", min=0.05, help="Seconds between polls (--watch, --follow, cancel --wait).")
]
# A dataset upload that never becomes an execution (trigger failure, wrong key) must not be watched forever.
START_GRACE_SECONDS = 180.0
# The reaper finalizes an aborted/timed-out run shortly after its execution ends.
FINALIZE_GRACE_SECONDS = 120.0
sleep = time.sleep  # the one wait of every polling loop (tests advance a fake pipeline here)
_STATUS_STYLE = {"SUCCEEDED": "green", "FAILED": "red", "TIMED_OUT": "red", "ABORTED": "yellow", "STOPPED": "yellow"}


def _style(status: str) -> str:
    return _STATUS_STYLE.get(status, "cyan")


def _money(value: Any) -> str:
    return "-" if value is None else f"${value:,.2f}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


def _progress_text(progress: dict[str, Any]) -> str:
    step, total = progress.get("step"), progress.get("total_steps")
    if step is not None and total:
        return f"{step}/{total}"
    return "-" if step is None else str(step)


def _figure(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.4g}"


# -- mtrl runs --------------------------------------------------------------------------------------------
def runs(
    *,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="Most runs to list.")] = 20,
    prefix: PrefixOption = "mtrl",
    region: RegionOption = None,
    profile: ProfileOption = None,
    endpoint_url: EndpointOption = None,
    as_json: JsonOption = False,
) -> None:
    """List runs, newest first (from the run table's listing index)."""
    connection = connect(prefix=prefix, region=region, profile=profile, endpoint_url=endpoint_url, as_json=as_json)
    with remote_errors(connection.aws, as_json=as_json):
        records = client_runs.list_runs(connection.client("dynamodb"), connection.deployment, limit=limit)
    views = [client_runs.run_view(record) for record in records]
    if as_json:
        print_json({"runs": views})
        return
    if not views:
        console.print(f"no runs yet in {connection.deployment.run_table}: start one with `mtrl submit FILE`")
        return
    cells = {
        "run id": [view["run_id"] for view in views],
        "status": [view["status"] for view in views],
        "created": [_created(view["created_at"]) for view in views],
        "backend": [str(view["backend"] or "-") for view in views],
        "environment": [str(view["environment"] or "-") for view in views],
        "progress": [_progress_text(view["progress"]) for view in views],
        "reward": ["-" if view["reward_mean"] is None else f"{view['reward_mean']:.3f}" for view in views],
        "cost": [_money(view["cost_usd"]) for view in views],
    }
    shown = _fitting_columns(cells, console.width)
    table = Table(title=f"runs ({prefix}, {connection.deployment.region})")
    for column in shown:
        # Run ids are what people copy into the next command: never wrap or shorten them.
        wide = max(len(column), *(len(cell) for cell in cells[column]))
        table.add_column(
            column,
            justify="right" if column in {"progress", "reward", "cost"} else "left",
            no_wrap=True,
            overflow="ellipsis",
            min_width=wide if column in _NEVER_CUT else None,
        )
    for index, view in enumerate(views):
        row: list[RenderableType] = [cells[column][index] for column in shown]
        if "status" in shown:
            row[shown.index("status")] = Text(view["status"], style=_style(view["status"]))
        table.add_row(*row)
    if len(shown) < len(cells):
        left = ", ".join(column for column in cells if column not in shown)
        table.caption = f"not shown at this width: {left} (--json has every field)"
    console.print(table)


# The columns `mtrl runs` shows first when the terminal is narrow; a column that does not fit whole is left out.
_COLUMN_PRIORITY = ("run id", "status", "progress", "created", "reward", "cost", "environment", "backend")
_NEVER_CUT = {"run id", "status"}


def _fitting_columns(cells: dict[str, list[str]], width: int) -> list[str]:
    """The columns that fit ``width`` whole, in priority order (shown in the table's own order); the run id and
    the status always."""
    chosen: list[str] = []
    used = 1  # the table's left border
    for column in _COLUMN_PRIORITY:
        needed = max(len(column), *(len(cell) for cell in cells[column])) + 3  # padding and the border after it
        if column in _NEVER_CUT or used + needed <= width:
            chosen.append(column)
            used += needed
    return [column for column in cells if column in chosen]


def _created(stamp: Any) -> str:
    """``2026-11-29T10:00:00.000Z`` → ``2026-11-29 10:00`` (UTC; `mtrl status` shows the whole stamp)."""
    text = str(stamp or "-")
    return f"{text[:10]} {text[11:16]}" if len(text) >= 16 and text[10] == "T" else text


# -- mtrl status ------------------------------------------------------------------------------------------
def status_renderable(view: dict[str, Any]) -> RenderableType:
    summary = Table.grid(padding=(0, 2))
    summary.add_column(style="bold")
    summary.add_column(overflow="fold")  # a long URI or cause wraps whole, never cut with an ellipsis
    summary.add_row("run", view["run_id"])
    summary.add_row("status", Text(view["status"], style=_style(view["status"])))
    if view["phase"]:
        summary.add_row("phase", view["phase"])
    if view["queue_position"] is not None and view["status"] == RunStatus.WAITING_FOR_SLOT.value:
        summary.add_row("queue", f"{view['queue_position']} run(s) ahead")
    summary.add_row("backend / env", f"{view['backend'] or '-'} / {view['environment'] or '-'}")
    summary.add_row("dataset", str(view["dataset_uri"] or "-"))
    summary.add_row("elapsed", _duration(view["elapsed_seconds"]))
    if view["job_id"]:
        summary.add_row("job", f"{view['job_id']} ({view['job_state'] or '-'})")
    summary.add_row("progress", _progress_text(view["progress"]))
    if view["reward_mean"] is not None:
        summary.add_row("reward mean", f"{view['reward_mean']:.4f}")
    if view.get("evaluation_measure"):
        summary.add_row("eval measures", evaluation_label(view["evaluation_measure"]))
    for name, value in sorted(view["evaluation"].items()):
        summary.add_row(f"eval {name}", _figure(value) if isinstance(value, float) else str(value))
    baseline = view.get("baseline")
    if baseline:
        for name, pair in baseline["metrics"].items():
            before, after = _figure(pair["baseline"]), _figure(pair["after_training"])
            summary.add_row(f"baseline {name}", f"{before} before training → {after} after")
    summary.add_row("cost so far", _money(view["cost_usd"]))
    _add_health_row(summary, view.get("health"), succeeded=view["status"] == RunStatus.SUCCEEDED.value)
    if view["error"]:
        error = view["error"]
        name = str(error.get("error") or "")
        # The Lambda runtime's wrapper names say nothing: the cause below is what went wrong.
        where = str(error.get("step")) if name in GENERIC_ERROR_NAMES or not name else f"{error.get('step')}: {name}"
        summary.add_row("failed at", Text(where, style="red"))
        summary.add_row("cause", str(error.get("cause") or error.get("plain") or ""))
    if view["teardown_error"]:
        summary.add_row("teardown", Text(str(view["teardown_error"]), style="red"))
    phases = Table(title="phases", title_justify="left")
    for column in ("phase", "started", "took", "outcome"):
        phases.add_column(column)
    for phase in view["phases"]:
        running = phase["ended_at"] is None and not view["final"]
        phases.add_row(
            phase["name"],
            str(phase["started_at"] or "-"),
            _duration(phase["seconds"]) + (" …" if running else ""),
            phase["outcome"] or ("running" if running else "-"),
        )
    return Group(summary, phases) if view["phases"] else summary


def _add_health_row(summary: Table, health: dict[str, Any] | None, *, succeeded: bool) -> None:
    if health:
        summary.add_row("health", _health_text(health, succeeded=succeeded))


def _health_text(health: dict[str, Any], *, succeeded: bool = False) -> Text:
    """``warn: flat_groups warn at step 8, …`` (the training-health verdict; mtrl health for the details)."""
    if health.get("error"):
        return Text(f"not evaluated: {health['error']}", style="yellow")
    verdict = str(health.get("verdict") or "ok")
    step = converged_at(health, succeeded=succeeded)
    if step is not None:  # a run that finished with its reward levelled off: news, not an alarm
        return Text.assemble(("converged", "green"), f": {converged_text(step)}")
    fired = ", ".join(f"{item['rule']} {item['level']} at step {item['step']}" for item in health.get("fired") or [])
    style = {"ok": "green", "warn": "yellow"}.get(verdict, "red")
    return Text.assemble((verdict, style), f": {fired}" if fired else ": no rule fired")


def _exit_code(view: dict[str, Any]) -> int:
    return EXIT_OK if view["status"] == RunStatus.SUCCEEDED.value else EXIT_INVALID


def status(
    run_id: RunArgument,
    *,
    watch: Annotated[bool, typer.Option("--watch", help="Refresh until the run is final.")] = False,
    interval: IntervalOption = 5.0,
    prefix: PrefixOption = "mtrl",
    region: RegionOption = None,
    profile: ProfileOption = None,
    endpoint_url: EndpointOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a run: phase, timings, progress, reward mean, cost so far.

    Exit code: 0 when the run is (or, with --watch, ends) SUCCEEDED, 1 when it failed, timed out or was
    cancelled; without --watch a run still in progress exits 0."""
    connection = connect(prefix=prefix, region=region, profile=profile, endpoint_url=endpoint_url, as_json=as_json)
    record, execution = _existing_run(connection, run_id, as_json=as_json)
    if watch:
        raise typer.Exit(watch_run(connection, run_id, interval=interval, as_json=as_json))
    if record is None:  # started but not registered yet (Register is the execution's first step)
        view = {**_bare_view(run_id), "status": "STARTING", "execution_status": execution}
        if as_json:
            print_json(view)
        else:
            console.print(f"run {run_id} has started (execution {execution}) but is not registered yet")
        return
    view = client_runs.run_view(record)
    if as_json:
        print_json(view)
    else:
        console.print(status_renderable(view))
    if view["final"]:
        raise typer.Exit(_exit_code(view))


def watch_run(
    connection: Connection,
    run_id: str,
    *,
    interval: float,
    as_json: bool,
    upload: tuple[str, str | None] | None = None,
) -> int:
    """Follow a run until it is final (live display unless --json); returns the exit code.

    ``upload`` = (key, version id) of the dataset just submitted: used to find the run if the trigger
    named it differently (see ``mtrl.client.runs.started_run_for_upload``)."""
    # A live display redraws in place on a terminal; piped (`mtrl submit --watch | cat`) rich would print it only at
    # the end, so there each change is a line of its own, flushed as it happens.
    live = None
    if not as_json and console.is_terminal:
        live = Live(Text(f"waiting for run {run_id} to start …"), console=console, auto_refresh=False)
        live.start()
    try:
        view = _follow(connection, run_id, interval=interval, live=live, as_json=as_json, upload=upload)
    finally:
        if live is not None:
            live.stop()
    if as_json:
        print_json(view)
    elif live is None:
        console.print(status_renderable(view))
    elif view.get("note"):
        error_console.print(f"[yellow]{view['note']}[/]", highlight=False, soft_wrap=True)
    return _exit_code(view)


def _follow(
    connection: Connection,
    run_id: str,
    *,
    interval: float,
    live: Live | None,
    as_json: bool,
    upload: tuple[str, str | None] | None,
) -> dict[str, Any]:
    registry = connection.registry()
    stepfunctions = connection.client("stepfunctions")
    started = time.monotonic()
    ended_at: float | None = None  # when the execution was first seen finished without a final record
    shown = ""  # the last line printed when piped
    while True:
        with remote_errors(connection.aws, as_json=as_json):
            record = registry.find(run_id)
            execution = None
            if not _is_final(record):
                execution = client_runs.execution_status(stepfunctions, connection.deployment, run_id)
        if record is not None:
            view = client_runs.run_view(record)
            if live is not None:
                live.update(status_renderable(view), refresh=True)
            elif not as_json:
                shown = _report_change(view, shown)
            if view["final"]:
                return view
        if record is None and execution is None and upload is not None:
            with remote_errors(connection.aws, as_json=as_json):
                found = client_runs.started_run_for_upload(
                    stepfunctions, connection.deployment, run_id=run_id, key=upload[0], version_id=upload[1]
                )
            if found is not None and found != run_id:
                if not as_json:
                    error_console.print(f"the pipeline named this upload's run {found}", highlight=False)
                run_id = found
                continue
        waited = time.monotonic() - started
        if record is None and execution is None and waited > START_GRACE_SECONDS:
            fail(
                f"run {run_id}: no pipeline execution started within {START_GRACE_SECONDS:.0f} s of watching "
                f"(check the upload key and `mtrl logs {run_id}`)",
                code=EXIT_INVALID,
                as_json=as_json,
            )
        if execution is not None and execution != "RUNNING":
            ended_at = ended_at or time.monotonic()
            if time.monotonic() - ended_at > FINALIZE_GRACE_SECONDS:
                # The reaper should have finalized the record by now; report what Step Functions says.
                view = client_runs.run_view(record) if record is not None else _bare_view(run_id)
                view["status"] = view["status"] if view["final"] else execution
                view["note"] = (
                    f"the execution ended {execution} but the run record was not finalized within "
                    f"{FINALIZE_GRACE_SECONDS:.0f} s (see `mtrl logs {run_id}`)"
                )
                return view
        sleep(interval)


def _report_change(view: dict[str, Any], shown: str) -> str:
    """Piped output: one line whenever the run's status, phase or progress changes, flushed at once."""
    line = f"{view['run_id']}: {view['status']}"
    if view.get("phase"):
        line += f", phase {view['phase']}"
    if view.get("progress", {}).get("step") is not None:
        line += f", step {_progress_text(view['progress'])}"
    if view.get("reward_mean") is not None:
        line += f", reward mean {view['reward_mean']:.4f}"
    if line != shown:
        console.print(line, highlight=False, soft_wrap=True)
        console.file.flush()
    return line


def _existing_run(connection: Connection, run_id: str, *, as_json: bool) -> tuple[dict[str, Any] | None, str | None]:
    """(record, execution status) of a run that exists in either place; a run in neither is a usage error."""
    with remote_errors(connection.aws, as_json=as_json):
        record = connection.registry().find(run_id)
        execution = None
        if record is None:
            execution = client_runs.execution_status(connection.client("stepfunctions"), connection.deployment, run_id)
            if execution is None:
                raise client_runs.RunNotFound(f"run {run_id} is not registered and has no pipeline execution")
    return record, execution


def _bare_view(run_id: str) -> dict[str, Any]:
    return {"run_id": run_id, "status": "UNKNOWN", "final": False, "phases": []}


# -- mtrl logs --------------------------------------------------------------------------------------------
def logs(
    run_id: RunArgument,
    *,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines until the run is final.")
    ] = False,
    interval: IntervalOption = 5.0,
    prefix: PrefixOption = "mtrl",
    region: RegionOption = None,
    profile: ProfileOption = None,
    endpoint_url: EndpointOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print the CloudWatch Logs lines of the pipeline's functions and state machine that mention the run."""
    connection = connect(prefix=prefix, region=region, profile=profile, endpoint_url=endpoint_url, as_json=as_json)
    deployment = connection.deployment
    if not deployment.log_groups:
        fail(
            f"stack {prefix}-pipeline has no LogGroupNames output: redeploy it with this version of mtrl",
            as_json=as_json,
        )
    if follow:  # following a mistyped id would never end
        _existing_run(connection, run_id, as_json=as_json)
    logs_client = connection.client("logs")
    registry = connection.registry()
    seen: set[str] = set()
    raw = os.environ.get(LOG_FORMAT_VARIABLE, "").lower() == "json"
    start_ms: int | None = None
    printed: list[dict[str, Any]] = []
    while True:
        with remote_errors(connection.aws, as_json=as_json):
            lines, missing = client_runs.log_lines(logs_client, deployment, run_id, start_ms=start_ms)
            final = (not follow) or _is_final(registry.find(run_id))
        for line in lines:
            if line.event_id in seen:
                continue
            seen.add(line.event_id)
            if as_json:
                printed.append(line.to_dict())
            else:
                stamp = datetime.fromtimestamp(line.timestamp / 1000, UTC).strftime("%H:%M:%S.%f")[:-3]
                name = line.group.rsplit("/", 1)[-1]
                text = escape(line.message if raw else readable_log_message(line.message))
                console.print(f"[dim]{stamp}[/] [bold]{name}[/] {text}", highlight=False, soft_wrap=True)
        if lines:
            start_ms = lines[-1].timestamp  # same millisecond may hold more lines: `seen` drops repeats
        if final:
            break
        sleep(interval)
    if as_json:
        print_json({"run_id": run_id, "lines": printed, "missing_log_groups": missing})
    elif not seen:
        error_console.print(
            f"no log lines mention {run_id} (is the run id right? `mtrl runs` lists them)", highlight=False
        )


# MTRL_LOG_FORMAT=json: `mtrl logs` prints each line as the function logged it (Powertools' JSON), not re-worded.
LOG_FORMAT_VARIABLE = "MTRL_LOG_FORMAT"
# Powertools' and Lambda's own keys: the same on every line, so they say nothing about this one.
_LOG_NOISE = frozenset(
    {
        "level", "message", "timestamp", "location", "service", "xray_trace_id", "cold_start", "function_name",
        "function_memory_size", "function_arn", "function_request_id", "sampling_rate", "run_id",
    }
)  # fmt: skip


def readable_log_message(message: str) -> str:
    """A structured log line for people: ``INFO started (phase=train)`` for Powertools' JSON, ``TaskStateEntered
    Train`` for the state machine's; any other line as it is."""
    try:
        document = json.loads(message)
    except ValueError:
        return message
    if not isinstance(document, dict):
        return message
    if "type" in document and "details" in document:  # a Step Functions execution history event
        details = document["details"] if isinstance(document["details"], dict) else {}
        return " ".join(str(part) for part in (document["type"], details.get("name") or "") if part)
    extra = ", ".join(
        f"{key}={_log_value(value)}" for key, value in document.items() if key not in _LOG_NOISE and value is not None
    )
    head = " ".join(str(part) for part in (document.get("level"), document.get("message")) if part)
    return f"{head} ({extra})" if extra and head else head or extra or message


def _log_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _is_final(record: dict[str, Any] | None) -> TypeGuard[dict[str, Any]]:
    """Whether the run record exists and its status is terminal."""
    return record is not None and RunStatus(record["status"]).terminal


# -- mtrl cancel ------------------------------------------------------------------------------------------
def cancel(
    run_id: RunArgument,
    *,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Wait until teardown has run and the run is ABORTED.")
    ] = True,
    timeout: Annotated[float, typer.Option("--timeout", min=1.0, help="Seconds to wait for teardown.")] = 600.0,
    interval: IntervalOption = 5.0,
    prefix: PrefixOption = "mtrl",
    region: RegionOption = None,
    profile: ProfileOption = None,
    endpoint_url: EndpointOption = None,
    as_json: JsonOption = False,
) -> None:
    """Cancel a run: stop its Step Functions execution (StopExecution).

    The pipeline's reaper function reacts to the execution's ABORTED status change: it runs the backend's
    teardown (cancels the training job, removes every resource the run recorded, frees its slot), then
    reports the run as ABORTED with one notification. With --wait (the default) this command waits for
    that; exit 0 once the run is final and teardown completed, 1 if teardown reported problems or did not
    finish within --timeout."""
    connection = connect(prefix=prefix, region=region, profile=profile, endpoint_url=endpoint_url, as_json=as_json)
    registry = connection.registry()
    with remote_errors(connection.aws, as_json=as_json):
        record = registry.find(run_id)
        if _is_final(record):
            fail(
                f"run {run_id} already ended {record['status']}: nothing to cancel", code=EXIT_INVALID, as_json=as_json
            )
        result = client_runs.cancel(connection.client("stepfunctions"), connection.deployment, run_id, record)
    document: dict[str, Any] = {
        "run_id": run_id,
        "execution_arn": result.execution_arn,
        "stopped": result.stopped,
        "execution_status": result.execution_status,
    }
    if not result.stopped:
        document["note"] = f"the execution had already ended {result.execution_status}"
    if not as_json:
        console.print(
            f"stopped execution of {run_id}; teardown runs in the pipeline's reaper"
            if result.stopped
            else f"the execution of {run_id} had already ended {result.execution_status}",
            highlight=False,
        )
    if not wait or record is None:
        if record is None:  # stopped before Register: no record, nothing created, the reaper frees any slot ticket
            document["note"] = "the run had not registered yet: nothing was created, so there is nothing to tear down"
            if not as_json:
                console.print(document["note"], highlight=False)
        if as_json:
            print_json(document)
        return
    ok = _await_teardown(
        registry, run_id, document, timeout=timeout, interval=interval, connection=connection, as_json=as_json
    )
    raise typer.Exit(EXIT_OK if ok else EXIT_INVALID)


def _await_teardown(
    registry: Any,
    run_id: str,
    document: dict[str, Any],
    *,
    timeout: float,
    interval: float,
    connection: Connection,
    as_json: bool,
) -> bool:
    """Wait for the reaper to tear down and finalize the run; report and return whether all went well."""
    deadline = time.monotonic() + timeout
    record = None
    with remote_errors(connection.aws, as_json=as_json):
        while time.monotonic() < deadline:
            record = registry.find(run_id)
            if _is_final(record):
                break
            sleep(interval)
    final = _is_final(record)
    document["status"] = record["status"] if record else None
    document["teardown_error"] = (record or {}).get("teardown_error")
    document["teardown"] = (record["phases"].get("teardown") or {}).get("outcome") if record else None
    ok = final and not document["teardown_error"]
    if as_json:
        print_json(document)
    elif not final:
        error_console.print(
            f"[red]run {run_id} was not finalized within {timeout:.0f} s[/]: teardown may still be running; "
            f"check `mtrl status {run_id}` and `mtrl logs {run_id}`",
            highlight=False,
        )
    elif document["teardown_error"]:
        error_console.print(f"[red]teardown reported problems:[/] {document['teardown_error']}", highlight=False)
    else:
        console.print(
            f"run {run_id} is {document['status']}; teardown {document['teardown'] or 'done'}", highlight=False
        )
    return ok
