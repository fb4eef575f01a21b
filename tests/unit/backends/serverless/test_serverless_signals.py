"""The serverless backend's signal rows: ``DescribeJob``'s ``ProgressInfo`` (a model-validated fake: moto 5.2.5 has
no ``DescribeJob``) and the agent's ``mtrl/Episodes`` EMF lines read back with ``GetMetricData`` (moto), written to
``runs/<run id>/signals.jsonl`` (moto S3).

CloudWatch turns an EMF log line into metric data points; moto cannot run that extraction, so ``aws_fakes.ingest_emf``
does it the documented way (one data point per metric the line declares, with the line's dimensions and timestamp)
from lines the real writer (``mtrl.health.emf.EpisodeMetrics``, as the agent calls it) printed for real Wordle
episodes.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aws_fakes import ACCOUNT, REGION, FakeAws, ingest_emf

from mtrl.backends._aws import AwsClients
from mtrl.backends.episode_rows import EMF_LAG_SECONDS, WINDOW_END_KEY
from mtrl.backends.serverless.adapter import ServerlessAdapter
from mtrl.contracts.backend import RunContext
from mtrl.envs.registry import load_spec
from mtrl.envs.rollout import Rollout, StopEpisode, play
from mtrl.health.emf import JOB_DIMENSION, EpisodeMetrics
from mtrl.health.rules import evaluate
from mtrl.health.signals import parse_signals

BUCKET = "mtrl-data-123456789012"
RUN_ID = "wordle-v3-20261129T103000Z"
JOB = "mtrl-wordle-v3-abc"
JOB_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:job/AgentRFT/{JOB}"
SIGNALS_KEY = f"runs/{RUN_ID}/signals.jsonl"
# A whole hour in the recent past: CloudWatch keeps one-minute data points for 15 days.
START = (datetime.now(UTC) - timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now.timestamp()


def run_context() -> RunContext:
    settings = {
        "region": REGION,
        "environment": "wordle",
        "serverless_job_role_arn": f"arn:aws:iam::{ACCOUNT}:role/mtrl-serverless-job",
        "hyperparameters": {"group_size": 4, "max_steps": 10},
    }
    return RunContext(
        run_id=RUN_ID,
        settings=settings,
        dataset_uri=f"s3://{BUCKET}/training-data/wordle.jsonl",
        eval_dataset_uri=None,
        output_uri=f"s3://{BUCKET}/runs/{RUN_ID}/",
    )


class Job:
    """The fake service's view of the job: DescribeJob answers with the current ProgressInfo."""

    def __init__(self, aws: FakeAws) -> None:
        self.step: int | None = None
        aws.on("sagemaker", "DescribeJob", self.describe)

    def describe(self, params: dict[str, Any]) -> dict[str, Any]:
        assert params == {
            "JobName": JOB,
            "JobCategory": "AgentRFT",
            "__uri__": "/",
            "__headers__": params["__headers__"],
        }
        response: dict[str, Any] = {
            "JobName": JOB,
            "JobArn": JOB_ARN,
            "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/mtrl-serverless-job",
            "JobCategory": "AgentRFT",
            "JobConfigSchemaVersion": "1.0.0",
            "CreationTime": START,
            "LastModifiedTime": START,
            "JobStatus": "InProgress",
            "SecondaryStatus": "Training",
            "SecondaryStatusTransitions": [{"Status": "Training", "StartTime": START}],
        }
        if self.step is not None:
            info = {"MaxSteps": 10, "CurrentStep": self.step}
            response["JobConfigDocument"] = json.dumps({"ServiceOutput": {"ProgressInfo": info}})
        return response


@pytest.fixture
def world(aws: FakeAws) -> tuple[FakeAws, Job, Clock, ServerlessAdapter]:
    aws.session.client("s3").create_bucket(Bucket=BUCKET)
    clock = Clock()
    return aws, Job(aws), clock, ServerlessAdapter(AwsClients(aws.session), sleep=lambda _s: None, clock=clock)


def wordle_episode(actions: list[str]) -> Rollout:
    spec = load_spec("wordle")
    replies = iter(actions)

    def policy(messages: list[dict[str, str]], *, timeout_s: float | None) -> str:
        for reply in replies:
            return reply
        raise StopEpisode

    return play(spec.make(), {"prompt": "Guess", "answer": "beach"}, policy, spec.rules())


def ingest(aws: FakeAws, rollout: Rollout, *, at: datetime, job: str = JOB) -> None:
    """What the agent prints for one episode, turned into CloudWatch data points (the EMF extraction)."""
    stream = io.StringIO()
    EpisodeMetrics("wordle", dimensions={JOB_DIMENSION: job}, stream=stream).publish(
        [[rollout]], timestamp_ms=int(at.timestamp() * 1000)
    )
    assert ingest_emf(aws.session.client("cloudwatch"), stream.getvalue(), at=at) > 0


def signals_text(aws: FakeAws) -> str:
    body: bytes = aws.session.client("s3").get_object(Bucket=BUCKET, Key=SIGNALS_KEY)["Body"].read()
    return body.decode()


def poll(world: tuple[FakeAws, Job, Clock, ServerlessAdapter], step: int | None, at: datetime) -> Any:
    _, job, clock, backend = world
    job.step, clock.now = step, at
    return backend.status(run_context(), JOB_ARN)


def test_rows_follow_the_service_steps_and_carry_the_agents_episode_figures(world: Any) -> None:
    aws = world[0]
    malformed = wordle_episode(["12345", "raise", "beach"])  # one unparsable guess, then solved
    clean = wordle_episode(["raise", "beach"])
    ingest(aws, malformed, at=START + timedelta(minutes=3))
    ingest(aws, clean, at=START + timedelta(minutes=4))
    ingest(aws, clean, at=START + timedelta(minutes=5), job="another-job")  # another run's job: not this row's
    first_poll = START + timedelta(minutes=10)
    assert poll(world, None, START + timedelta(minutes=1)).progress.get("signals_error") is None
    with pytest.raises(Exception, match="NoSuchKey"):  # no ProgressInfo yet: no row, no file
        signals_text(aws)

    status = poll(world, 2, first_poll)
    assert "signals_error" not in status.progress
    signals = parse_signals(signals_text(aws))
    assert (signals.header.planned_steps, signals.header.group_size) == (10, 4)
    (row,) = signals.rows
    assert row.step == 2
    assert row.time is not None
    assert row.time.startswith(first_poll.isoformat()[:16])
    assert row.malformed_share == 0.5  # one of this job's two episodes
    assert row.reward_mean == pytest.approx(((malformed.reward or 0) + (clean.reward or 0)) / 2)
    assert row.mean_turns == 2.5
    assert (row.error_share, row.timeout_share, row.cap_hit_share) == (0.0, 0.0, 0.0)
    assert row.reward_spread_mean is None
    assert row.evaluation_mean is None
    assert row.extra["episodes"] == 2
    window_end = first_poll - timedelta(seconds=EMF_LAG_SECONDS)
    assert row.extra[WINDOW_END_KEY] == window_end.isoformat().replace("+00:00", "Z")

    # The same step again: nothing new. Episodes that arrived late (inside the lag) count in the next row, once.
    ingest(aws, malformed, at=first_poll - timedelta(seconds=30))
    poll(world, 2, first_poll + timedelta(minutes=1))
    assert len(parse_signals(signals_text(aws)).rows) == 1
    poll(world, 5, first_poll + timedelta(minutes=8))
    rows = parse_signals(signals_text(aws)).rows
    assert [r.step for r in rows] == [2, 5]  # steps the poll did not see one by one share the latest row
    assert rows[1].malformed_share == 1.0
    assert rows[1].extra["episodes"] == 1


def test_the_rows_feed_the_health_rules(world: Any) -> None:
    aws = world[0]
    for step in range(1, 11):  # clean through the warm-up, then the policy drifts into unparsable guesses
        at = START + timedelta(minutes=10 * step)
        actions = ["raise", "beach"] if step <= 5 else ["??", "12345"]
        ingest(aws, wordle_episode(actions), at=at - timedelta(minutes=5))
        poll(world, step, at)
    signals = parse_signals(signals_text(aws))
    assert [row.malformed_share for row in signals.rows] == [0.0] * 5 + [1.0] * 5
    document = evaluate(signals, now=START + timedelta(minutes=101), ended=False)
    assert any(item["rule"] == "malformed_actions" for item in document["fired"]), document["fired"]


def test_a_signals_file_that_does_not_parse_is_left_alone_and_reported_with_the_run_id(world: Any) -> None:
    aws = world[0]
    aws.session.client("s3").put_object(Bucket=BUCKET, Key=SIGNALS_KEY, Body=b'{"planned_steps": 10}\n{"step": "x"}\n')
    status = poll(world, 3, START + timedelta(minutes=10))
    assert RUN_ID in status.progress["signals_error"]
    assert status.progress["step"] == 3  # the job's status is still reported
    assert signals_text(aws) == '{"planned_steps": 10}\n{"step": "x"}\n'


def test_no_bucket_access_never_fails_the_status_poll(world: Any) -> None:
    aws = world[0]
    aws.session.client("s3").delete_bucket(Bucket=BUCKET)
    status = poll(world, 1, START + timedelta(minutes=10))
    assert status.progress["step"] == 1
    assert RUN_ID in status.progress["signals_error"]
    assert "NoSuchBucket" in status.progress["signals_error"]


def test_the_window_sent_to_cloudwatch_is_this_jobs_series_on_whole_minutes(world: Any) -> None:
    aws = world[0]
    sent: list[dict[str, Any]] = []
    aws.session.events.register(
        "before-parameter-build.cloudwatch.GetMetricData", lambda params, **_: sent.append(dict(params))
    )
    poll(world, 1, START + timedelta(minutes=10, seconds=42))
    (request,) = sent
    assert (request["StartTime"], request["EndTime"]) == (START, START + timedelta(minutes=8))
    stats = {query["MetricStat"]["Stat"] for query in request["MetricDataQueries"]}
    assert stats == {"Sum", "SampleCount"}
    this_job = [{"Name": "Environment", "Value": "wordle"}, {"Name": "Job", "Value": JOB}]
    for query in request["MetricDataQueries"]:
        metric = query["MetricStat"]["Metric"]
        if metric["Namespace"] == "mtrl/Episodes":
            assert metric["Dimensions"] == this_job
        else:  # the reward's within-group spread (the agent has no groups; the reward workers do)
            assert metric["Namespace"] == "mtrl/RewardSignal"
            assert metric["Dimensions"] == [*this_job, {"Name": "Component", "Value": "reward"}]
