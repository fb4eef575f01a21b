"""``mtrl.backends.episode_rows.update_signals`` against moto, attacked: progress values that are not steps, a step
that does not advance, a file another writer extended, the figures of an empty window. Bad input changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from mtrl.backends.episode_rows import episode_count, update_signals
from mtrl.health.signals import parse_signals

BUCKET, RUN_ID = "data", "r-1"
KEY = f"runs/{RUN_ID}/signals.jsonl"
NOW = (datetime.now(UTC) - timedelta(hours=1)).replace(second=0, microsecond=0)
SERIES = {"Environment": "wordle", "RunId": RUN_ID}


@pytest.fixture
def clients(mocked_aws: None) -> tuple[Any, Any]:
    session = boto3.Session(region_name="us-east-1")
    s3 = session.client("s3")
    s3.create_bucket(Bucket=BUCKET)
    return s3, session.client("cloudwatch")


def update(clients: tuple[Any, Any], progress: dict[str, Any], now: datetime = NOW) -> Any:
    s3, cloudwatch = clients
    return update_signals(
        s3=s3,
        cloudwatch=cloudwatch,
        run_id=RUN_ID,
        output_uri=f"s3://{BUCKET}/runs/{RUN_ID}/",
        dimensions=SERIES,
        progress=progress,
        job_started=NOW - timedelta(minutes=30),
        now=now,
        group_size=None,
    )


def text(clients: tuple[Any, Any]) -> str | None:
    try:
        body: bytes = clients[0].get_object(Bucket=BUCKET, Key=KEY)["Body"].read()
    except clients[0].exceptions.NoSuchKey:
        return None
    return body.decode()


@pytest.mark.parametrize(
    "progress",
    [
        {},
        {"step": 3},  # no planned steps
        {"step": True, "total_steps": 10},
        {"step": 0, "total_steps": 10},
        {"step": -4, "total_steps": 10},
        {"step": 2.5, "total_steps": 10},
        {"step": "3", "total_steps": 10},
        {"step": 3, "total_steps": -1},
        {"step": 3, "total_steps": "ten"},
        {"step": 3, "total_steps": False},
    ],
)
def test_progress_that_is_not_a_step_writes_nothing(clients: tuple[Any, Any], progress: dict[str, Any]) -> None:
    assert update(clients, progress) is None
    assert text(clients) is None


def test_a_step_that_does_not_advance_changes_nothing(clients: tuple[Any, Any]) -> None:
    assert update(clients, {"step": 5, "total_steps": 10}) is not None
    before = text(clients)
    assert update(clients, {"step": 5, "total_steps": 10}, NOW + timedelta(minutes=5)) is None
    assert update(clients, {"step": 4, "total_steps": 10}, NOW + timedelta(minutes=6)) is None
    assert text(clients) == before


def test_fields_another_writer_added_are_kept_and_an_empty_window_is_unknown(clients: tuple[Any, Any]) -> None:
    clients[0].put_object(
        Bucket=BUCKET, Key=KEY, Body=b'{"planned_steps": 10}\n{"step": 1, "note": "by hand", "reward_mean": 0.5}\n'
    )
    row = update(clients, {"step": 2, "total_steps": 10})
    assert row is not None
    signals = parse_signals(text(clients) or "")
    assert [r.step for r in signals.rows] == [1, 2]
    assert signals.rows[0].extra == {"note": "by hand"}
    assert signals.rows[0].reward_mean == 0.5
    assert (row.reward_mean, row.malformed_share, row.reward_spread_mean) == (None, None, None)  # no lines
    assert "episodes" not in row.extra


def test_episode_count_sums_every_minute_of_the_series(clients: tuple[Any, Any]) -> None:
    cloudwatch = clients[1]
    dimensions = [{"Name": k, "Value": v} for k, v in SERIES.items()]
    for minute, count in ((1, 8.0), (7, 4.0), (40, 100.0)):  # the last one is after `until`
        cloudwatch.put_metric_data(
            Namespace="mtrl/Episodes",
            MetricData=[
                {
                    "MetricName": "Episodes",
                    "Dimensions": dimensions,
                    "Value": count,
                    "Timestamp": NOW + timedelta(minutes=minute),
                }
            ],
        )
    assert episode_count(cloudwatch, dimensions=SERIES, since=NOW, until=NOW + timedelta(minutes=30)) == 12
    assert (
        episode_count(
            cloudwatch,
            dimensions={"Environment": "wordle", "RunId": "other"},
            since=NOW,
            until=NOW + timedelta(minutes=30),
        )
        == 0
    )
