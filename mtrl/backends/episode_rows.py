"""Signal rows (``runs/<run id>/signals.jsonl``) for a backend whose trainer reports only its step: the episode
figures come back from the environment-side metrics the episode drivers publish (``mtrl.health.emf``, whose
``ROW_FIELD_METRICS`` says which metric holds each row field). This module is only that source: the reading back;
the row is the one builder's (``mtrl.health.rows``).

Used by ``serverless`` (the step from ``DescribeJob``'s ``ProgressInfo``; the agent Lambda's lines, one per
episode, with the dimensions ``Environment`` and ``Job``) and ``hyperpod`` (the step from the runner's status
report; the reward workers' lines, one per batch of groups, with ``Environment`` and ``RunId``). Neither trainer's
status carries reward figures: ``DescribeJobResponse`` has no metrics member (botocore's model; the per-step curves
are in the MLflow app, which this module does not read), and the Nova Forge status report has none either.

Each status poll that sees a new step appends one row for it: ``step``, ``time`` (the poll's), and the figures of
the lines in the window since the previous row — reward mean, malformed, turn-limit, error and timeout shares, mean
turns (``mtrl/Episodes``), and the within-group spread of the reward and its zero-spread share
(``mtrl/RewardSignal``, component ``reward``; only drivers that see whole groups publish it) — read with one
``GetMetricData`` call: per metric its Sum and SampleCount over one-minute periods, i.e. the mean over lines
(per episode for the agent; per batch of groups for the workers, whose batches are the same size but for the last).
The window ends ``EMF_LAG_SECONDS`` before the poll (EMF lines reach CloudWatch metrics a little late) on a whole
minute, and the next window starts where it ended, so no line is counted twice. Steps the poll did not see one by
one share one row (the latest step). ``evaluation_mean`` (the held-out measure) is not among these lines and stays
unknown. No new permission for the code that runs episodes: it only prints its lines.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from mtrl.backends._aws import S3Uri, error_code
from mtrl.health.emf import EPISODE_COUNT_METRIC, EPISODES_NAMESPACE, ROW_FIELD_METRICS
from mtrl.health.rows import signal_row
from mtrl.health.signals import (
    SIGNALS_FILE,
    SignalHeader,
    SignalRow,
    Signals,
    SignalsError,
    parse_signals,
    parse_time,
    render_signals,
)

EMF_LAG_SECONDS = 120
WINDOW_START_KEY = "episodes_since"  # row extras: the window its episode figures cover
WINDOW_END_KEY = "episodes_until"
_PERIOD = 60
# what is read back: every row field the lines carry (mtrl.health.emf), and how many episodes they counted
_QUERIED: dict[str, tuple[str, str, dict[str, str]]] = {
    **ROW_FIELD_METRICS,
    "episodes": (EPISODES_NAMESPACE, EPISODE_COUNT_METRIC, {}),
}


def _minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def read_signals(s3: Any, run_id: str, uri: S3Uri) -> Signals | None:
    """The rows written so far; None when there is no file yet. A file that does not parse is an error naming the
    run (it is never overwritten: the health poll reports it)."""
    try:
        body = s3.get_object(Bucket=uri.bucket, Key=uri.key)["Body"].read()
    except ClientError as error:
        if error_code(error) in {"NoSuchKey", "404", "NotFound"}:
            return None
        raise
    return parse_signals(body.decode("utf-8", errors="replace"), source=f"run {run_id}: {uri}")


def episode_figures(
    cloudwatch: Any, *, dimensions: Mapping[str, str], since: datetime, until: datetime
) -> dict[str, float | None]:
    """The lines' figures between ``since`` and ``until`` (row field → mean over lines; ``episodes`` is a count;
    None when no line had the metric)."""
    queries: list[dict[str, Any]] = []
    for index, (namespace, name, extra) in enumerate(_QUERIED.values()):
        series = [{"Name": key, "Value": value} for key, value in {**dimensions, **extra}.items()]
        metric = {"Namespace": namespace, "MetricName": name, "Dimensions": series}
        for stat in ("Sum", "SampleCount"):
            queries.append(
                {
                    "Id": f"m{index}{stat.lower()}",
                    "MetricStat": {"Metric": metric, "Period": _PERIOD, "Stat": stat},
                    "ReturnData": True,
                }
            )
    totals: dict[str, float] = {}
    token: str | None = None
    while True:
        request: dict[str, Any] = {"MetricDataQueries": queries, "StartTime": since, "EndTime": until}
        if token:
            request["NextToken"] = token
        response = cloudwatch.get_metric_data(**request)
        for result in response.get("MetricDataResults", []):
            values = [float(v) for v in result.get("Values", []) if math.isfinite(v)]
            totals[result["Id"]] = totals.get(result["Id"], 0.0) + sum(values)
        token = response.get("NextToken")
        if not token:
            break
    figures: dict[str, float | None] = {}
    for index, field in enumerate(_QUERIED):
        total, count = totals.get(f"m{index}sum", 0.0), totals.get(f"m{index}samplecount", 0.0)
        if field == "episodes":
            figures[field] = total
        else:
            figures[field] = total / count if count > 0 else None
    return figures


def episode_count(cloudwatch: Any, *, dimensions: Mapping[str, str], since: datetime, until: datetime) -> int:
    """How many episodes the lines of this series counted between ``since`` and ``until``."""
    series = [{"Name": key, "Value": value} for key, value in dimensions.items()]
    metric = {"Namespace": EPISODES_NAMESPACE, "MetricName": EPISODE_COUNT_METRIC, "Dimensions": series}
    query = {"Id": "episodes", "MetricStat": {"Metric": metric, "Period": _PERIOD, "Stat": "Sum"}, "ReturnData": True}
    total, token = 0.0, None
    while True:
        request: dict[str, Any] = {"MetricDataQueries": [query], "StartTime": _minute(since), "EndTime": until}
        if token:
            request["NextToken"] = token
        response = cloudwatch.get_metric_data(**request)
        for result in response.get("MetricDataResults", []):
            total += sum(float(v) for v in result.get("Values", []) if math.isfinite(v))
        token = response.get("NextToken")
        if not token:
            return int(total)


def update_signals(
    *,
    s3: Any,
    cloudwatch: Any,
    run_id: str,
    output_uri: str,
    dimensions: Mapping[str, str],
    progress: Mapping[str, Any],
    job_started: datetime | None,
    now: datetime,
    group_size: int | None,
) -> SignalRow | None:
    """Append the row of a step not seen yet (rewriting the file whole); returns it, or None when there is nothing
    new (no step reported yet, or the same step as the last row). ``progress`` holds the backend's ``step`` and
    ``total_steps``; ``dimensions`` name the series of this run's episode lines."""
    step, planned = progress.get("step"), progress.get("total_steps")
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        return None
    if not isinstance(planned, int) or isinstance(planned, bool) or planned < 0:
        return None
    uri = S3Uri.parse(output_uri).join(SIGNALS_FILE)
    existing = read_signals(s3, run_id, uri)
    rows = list(existing.rows) if existing else []
    if rows and step <= rows[-1].step:
        return None
    until = _minute(now - timedelta(seconds=EMF_LAG_SECONDS))
    since = _window_start(rows, job_started, until)
    figures: dict[str, float | None] = {}
    if until > since:
        figures = episode_figures(cloudwatch, dimensions=dimensions, since=since, until=until)
    extra: dict[str, Any] = {WINDOW_START_KEY: _iso(since), WINDOW_END_KEY: _iso(max(since, until))}
    if figures.get("episodes"):
        extra["episodes"] = int(figures["episodes"] or 0)
    row = signal_row(step, {field: figures.get(field) for field in ROW_FIELD_METRICS}, time=_iso(now), extra=extra)
    header = SignalHeader(planned_steps=planned, group_size=group_size)
    body = render_signals(header, [*rows, row]).encode("utf-8")
    s3.put_object(Bucket=uri.bucket, Key=uri.key, Body=body, ContentType="application/x-ndjson")
    return row


def _window_start(rows: list[SignalRow], job_started: datetime | None, until: datetime) -> datetime:
    """Where the previous row's window ended; for the first row, the job's creation (else the window is empty)."""
    if rows:
        previous = rows[-1].extra.get(WINDOW_END_KEY)
        if isinstance(previous, str):
            try:
                return parse_time(previous)
            except SignalsError:
                pass
        if rows[-1].time:
            return _minute(parse_time(rows[-1].time))
    if job_started is not None:
        return _minute(job_started.astimezone(UTC))
    return until
