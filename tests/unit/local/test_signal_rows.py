"""The local backend writes runs/<run id>/signals.jsonl every poll (moto S3), read back by mtrl.health."""

from __future__ import annotations

from typing import Any

import boto3

from mtrl.backends._aws import AwsClients
from mtrl.backends.local import LocalAdapter
from mtrl.contracts.backend import JobState
from mtrl.health.rules import evaluate
from mtrl.health.signals import parse_signals, parse_time
from tests.unit.local.test_adapter import BUCKET, REGION, _run, s3  # noqa: F401 - the moto fixture

KEY = "runs/words-v1-abc/signals.jsonl"


def _signals(client: Any) -> Any:
    return parse_signals(client.get_object(Bucket=BUCKET, Key=KEY)["Body"].read().decode(), source=KEY)


def test_every_poll_rewrites_the_rows_so_far(s3: Any) -> None:  # noqa: F811 - the fixture
    adapter = LocalAdapter(clients=AwsClients(boto3.Session(region_name=REGION)), chunk_seconds=0.01)
    run = _run()
    job_id = adapter.submit(run)
    first = _signals(s3)
    assert (first.header.planned_steps, first.header.group_size, first.rows) == (3, 6, ())  # SMALL: group_size 6
    steps_seen = []
    for _ in range(10):
        status = adapter.status(run, job_id)
        steps_seen.append(_signals(s3).last_step)
        if status.state.terminal:
            break
    assert status.state is JobState.SUCCEEDED
    assert steps_seen == [0, 1, 2, 3, 3]  # before-evaluation, 3 steps, after-evaluation
    signals = _signals(s3)
    assert [row.step for row in signals.rows] == [1, 2, 3]
    for row in signals.rows:
        assert row.time is not None
        parse_time(row.time)
        assert row.reward_mean is not None
        assert row.reward_spread_mean is not None
        assert row.zero_spread_share is not None
        assert row.mean_turns is not None
        assert row.mean_turns >= 1
        assert row.cap_hit_share is not None
        assert row.error_share == 0.0
        assert row.grad_norm is not None
        assert row.kl is None  # a log-linear policy has none: unknown, not zero
    # The held-out evaluation lands on the steps it was measured: eval_every = 3 and the final one, both step 3.
    assert [row.evaluation_mean is not None for row in signals.rows] == [False, False, True]
    assert evaluate(signals, ended=True)["verdict"] == "ok"  # 3 steps: all inside the warm-up, and complete
