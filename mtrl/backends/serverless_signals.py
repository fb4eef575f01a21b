"""A serverless run's signal rows (``runs/<run id>/signals.jsonl``), from what the service and the agent report.

The service tells only where training is: ``DescribeJob``'s ``JobConfigDocument.ServiceOutput.ProgressInfo``
(``CurrentStep``; ``MaxSteps`` or ``MaxEpoch`` × ``StepsPerEpoch``, read by ``serverless_status``); its
``DescribeJobResponse`` has no metrics member (botocore's model) and the per-step reward curves are in the MLflow app,
which this module does not read. What the episodes showed comes from the agent Lambda: every episode it plays is one
``mtrl/Episodes`` EMF line (``mtrl.health.emf``) with the dimensions ``Environment`` and ``Job`` (the job's name).

Each status poll that sees a new ``CurrentStep`` appends one row for it: ``step``, ``time`` (the poll's), and the
episode figures of the agent's lines in the window since the previous row — reward mean, malformed, turn-limit,
error and timeout shares, mean turns — read with one ``GetMetricData`` call (per metric: its Sum and SampleCount
over one-minute periods, so the share is per episode whatever the number of periods). The window ends
``EMF_LAG_SECONDS`` before the poll (EMF lines reach CloudWatch metrics a little late) on a whole minute, and the
next window starts where it ended, so no episode is counted twice. Steps the poll did not see one by one share one
row (the latest step). A single episode per invocation has no group, so the within-group spread stays unknown, and
``evaluation_mean`` (the held-out measure: the service's validation, which reports to MLflow) stays unknown too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from mtrl.backends._aws import S3Uri, error_code
from mtrl.health.emf import EPISODE_METRICS, EPISODES_NAMESPACE, JOB_DIMENSION
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
EPISODES_METRIC = "Episodes"
_PERIOD = 60
_ROW_FIELDS = dict(EPISODE_METRICS)  # row field → metric name


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
    cloudwatch: Any, *, env_id: str, job_name: str, since: datetime, until: datetime
) -> dict[str, float | None]:
    """The agent's episode figures between ``since`` and ``until`` (row field → value; None when no line had it)."""
    dimensions = [{"Name": "Environment", "Value": env_id}, {"Name": JOB_DIMENSION, "Value": job_name}]
    queries: list[dict[str, Any]] = []
    for index, name in enumerate([*_ROW_FIELDS.values(), EPISODES_METRIC]):
        metric = {"Namespace": EPISODES_NAMESPACE, "MetricName": name, "Dimensions": dimensions}
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
    for index, field in enumerate(_ROW_FIELDS):
        count = totals.get(f"m{index}samplecount", 0.0)
        figures[field] = totals.get(f"m{index}sum", 0.0) / count if count > 0 else None
    episodes_index = len(_ROW_FIELDS)
    figures["episodes"] = totals.get(f"m{episodes_index}sum", 0.0)
    return figures


def _share(value: float | None) -> float | None:
    return None if value is None else min(1.0, max(0.0, value))  # float sums may stray past [0, 1] by an ulp


def update_signals(
    *,
    s3: Any,
    cloudwatch: Any,
    run_id: str,
    output_uri: str,
    env_id: str,
    job_name: str,
    progress: Mapping[str, Any],
    job_started: datetime | None,
    now: datetime,
    group_size: int | None,
) -> SignalRow | None:
    """Append the row of a step not seen yet (rewriting the file whole); returns it, or None when there is nothing
    new (no ``ProgressInfo`` yet, or the same step as the last row)."""
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
        figures = episode_figures(cloudwatch, env_id=env_id, job_name=job_name, since=since, until=until)
    extra: dict[str, Any] = {WINDOW_START_KEY: _iso(since), WINDOW_END_KEY: _iso(max(since, until))}
    if figures.get("episodes"):
        extra["episodes"] = int(figures["episodes"] or 0)
    row = SignalRow(
        step=step,
        time=_iso(now),
        reward_mean=figures.get("reward_mean"),
        mean_turns=figures.get("mean_turns"),
        malformed_share=_share(figures.get("malformed_share")),
        cap_hit_share=_share(figures.get("cap_hit_share")),
        error_share=_share(figures.get("error_share")),
        timeout_share=_share(figures.get("timeout_share")),
        extra=extra,
    )
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
