"""`mtrl runs`, `status`, `logs`, `cancel` and `cost RUN` against a moto deployment seeded by the registry code."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from typer.testing import CliRunner

from mtrl.backends.hyperpod import CAPACITY_KIND
from mtrl.backends.pricing import cost_for_run
from mtrl.cli import app
from mtrl.client.deployment import Aws, CredentialsMissing, Target, execution_arn, translated_errors
from mtrl.runs import pipeline
from mtrl.runs.registry import RunStatus
from mtrl.runs.slots import SlotPool
from tests.unit.client.conftest import LOG_GROUPS, SAMPLE, Fake

runner = CliRunner()
OLD = "wordle-20261129T100000Z-0000000a"
NEW = "wordle-20261129T110000Z-0000000b"
BASE = int(time.time() * 1000) - 60_000  # CloudWatch Logs refuses events from the future
Sleeper = Callable[[Callable[[], object]], list[int]]


def _json(args: list[str], code: int) -> Any:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def test_runs_lists_only_runs_newest_first(fake: Fake) -> None:
    fake.seed_run(OLD, created_at="2026-11-29T10:00:00.000Z", status=RunStatus.SUCCEEDED)
    fake.seed_run(NEW, created_at="2026-11-29T11:00:00.000Z", progress={"step": 2, "total_steps": 5})
    SlotPool(fake.dynamodb, fake.deployment.run_table, capacity=1, lease_seconds=60, stale_after_seconds=300).enqueue(
        NEW, arrival="2026-11-29T11:00:00Z"
    )  # queue items share the table; the listing must not show them
    listed = _json(["runs"], 0)["runs"]
    assert [run["run_id"] for run in listed] == [NEW, OLD]
    assert [run["status"] for run in listed] == ["TRAINING", "SUCCEEDED"]
    assert _json(["runs", "--limit", "1"], 0)["runs"][0]["run_id"] == NEW
    table = runner.invoke(app, ["runs"])
    assert table.exit_code == 0
    assert table.stdout.index(NEW) < table.stdout.index(OLD)
    assert "2/5" in table.stdout


def test_runs_on_an_empty_table_says_how_to_start(fake: Fake) -> None:
    result = runner.invoke(app, ["runs"])
    assert result.exit_code == 0
    assert "mtrl submit" in result.stdout


def test_status_shows_phase_progress_reward_and_cost(fake: Fake) -> None:
    fake.seed_run(
        NEW, progress={"step": 3, "total_steps": 20}, metrics={"reward_mean": 0.42}, cost={"usd": 1.5}, job_id="j-1"
    )
    view = _json(["status", NEW], 0)  # still running: exit 0
    assert view["status"] == "TRAINING"
    assert view["phase"] == "train"
    assert view["progress"] == {"step": 3, "total_steps": 20}
    assert view["reward_mean"] == 0.42
    assert view["cost_usd"] == 1.5
    assert [phase["name"] for phase in view["phases"]] == ["register", "validate", "train"]
    assert view["phases"][0]["seconds"] is not None
    human = runner.invoke(app, ["status", NEW])
    assert human.exit_code == 0
    assert "0.4200" in human.stdout
    assert "$1.50" in human.stdout
    assert "3/20" in human.stdout


def test_status_exit_code_follows_the_final_state(fake: Fake) -> None:
    fake.seed_run(OLD, status=RunStatus.SUCCEEDED)
    fake.seed_run(NEW, status=RunStatus.FAILED)
    assert _json(["status", OLD], 0)["final"] is True
    failed = _json(["status", NEW], 1)
    assert failed["error"]["step"] == "Train"
    assert "the training job failed" in runner.invoke(app, ["status", NEW]).stdout


def test_status_of_an_unknown_run_points_at_runs(fake: Fake) -> None:
    result = runner.invoke(app, ["status", "nope-20261129T100000Z-00000000"])
    assert result.exit_code == 2
    assert "mtrl runs" in result.stderr


def test_status_of_a_started_but_unregistered_run(fake: Fake) -> None:
    _running_execution(fake, NEW)
    view = _json(["status", NEW], 0)
    assert view["status"] == "STARTING"
    assert view["execution_status"] == "RUNNING"


def test_watching_or_following_an_unknown_run_fails_at_once(fake: Fake, no_sleep: Sleeper) -> None:
    calls = no_sleep(lambda: None)
    for command in (["status", "--watch"], ["logs", "--follow"]):
        result = runner.invoke(app, [*command[:1], "nope-20261129T100000Z-00000000", *command[1:]])
        assert result.exit_code == 2, result.output
        assert "mtrl runs" in result.stderr
    assert calls == []


def test_status_watch_follows_until_final(fake: Fake, no_sleep: Sleeper) -> None:
    fake.seed_run(NEW)
    steps: Iterator[Callable[[], object]] = iter(
        [
            lambda: fake.registry.set_fields(NEW, progress={"step": 1, "total_steps": 2}),
            lambda: fake.registry.end_phase(NEW, "train"),
            lambda: fake.registry.finish(NEW, RunStatus.SUCCEEDED),
        ]
    )
    calls = no_sleep(lambda: next(steps)())  # noqa: PLW0108 - a fresh step per call
    result = runner.invoke(app, ["status", NEW, "--watch"])
    assert result.exit_code == 0, result.output
    assert len(calls) == 3
    assert "SUCCEEDED" in result.stdout


def test_status_watch_exits_1_when_the_run_fails(fake: Fake, no_sleep: Sleeper) -> None:
    fake.seed_run(NEW)
    no_sleep(lambda: fake.registry.finish(NEW, RunStatus.ABORTED, error={"step": "Train", "error": "Aborted"}))
    view = _json(["status", NEW, "--watch"], 1)
    assert view["status"] == "ABORTED"


def test_logs_prints_the_runs_lines_in_time_order(fake: Fake) -> None:
    fake.logs.create_log_stream(logGroupName=LOG_GROUPS[0], logStreamName="s1")
    fake.logs.create_log_stream(logGroupName=LOG_GROUPS[1], logStreamName="s2")
    fake.logs.put_log_events(
        logGroupName=LOG_GROUPS[0],
        logStreamName="s1",
        logEvents=[
            {"timestamp": BASE, "message": f'{{"message": "started", "run_id": "{NEW}"}}'},
            {"timestamp": BASE + 500, "message": f'{{"message": "other", "run_id": "{OLD}"}}'},
            {"timestamp": BASE + 3_000, "message": f"finished {NEW}"},
        ],
    )
    fake.logs.put_log_events(
        logGroupName=LOG_GROUPS[1],
        logStreamName="s2",
        logEvents=[{"timestamp": BASE + 1_000, "message": f"training {NEW} step 1"}],
    )
    fake.logs.delete_log_group(logGroupName=LOG_GROUPS[2])  # a function that never ran has no group yet
    document = _json(["logs", NEW], 0)
    assert [line["message"] for line in document["lines"]] == [
        f'{{"message": "started", "run_id": "{NEW}"}}',
        f"training {NEW} step 1",
        f"finished {NEW}",
    ]
    assert document["missing_log_groups"] == [LOG_GROUPS[2]]
    human = runner.invoke(app, ["logs", NEW])
    assert human.exit_code == 0
    assert "backend" in human.stdout
    assert OLD not in human.stdout


def test_logs_follow_stops_when_the_run_is_final(fake: Fake, no_sleep: Sleeper) -> None:
    fake.seed_run(NEW)
    fake.logs.create_log_stream(logGroupName=LOG_GROUPS[1], logStreamName="s")

    def more() -> None:
        fake.logs.put_log_events(
            logGroupName=LOG_GROUPS[1],
            logStreamName="s",
            logEvents=[{"timestamp": BASE + len(calls), "message": f"poll {len(calls)} {NEW}"}],
        )
        if len(calls) == 2:
            fake.registry.finish(NEW, RunStatus.SUCCEEDED)

    calls = no_sleep(more)
    document = _json(["logs", NEW, "--follow"], 0)
    assert [line["message"] for line in document["lines"]] == [f"poll 1 {NEW}", f"poll 2 {NEW}"]


def _running_execution(fake: Fake, run_id: str) -> str:
    return str(
        fake.stepfunctions.start_execution(stateMachineArn=fake.deployment.state_machine_arn, name=run_id)[
            "executionArn"
        ]
    )


def test_cancel_stops_the_execution_and_waits_for_the_reapers_teardown(fake: Fake, no_sleep: Sleeper) -> None:
    arn = _running_execution(fake, NEW)
    fake.seed_run(NEW, execution_arn=arn)

    def reaper() -> None:  # what EventBridge's status-change rule runs in the deployed pipeline
        status = fake.stepfunctions.describe_execution(executionArn=arn)["status"]
        pipeline.reap(fake.runtime(), {"detail": {"status": status, "name": NEW}})

    no_sleep(reaper)
    document = _json(["cancel", NEW], 0)
    assert document["stopped"] is True
    assert document["status"] == "ABORTED"
    assert document["teardown"] == "ok"
    assert fake.stepfunctions.describe_execution(executionArn=arn)["status"] == "ABORTED"
    record = fake.registry.get(NEW)
    assert record["error"]["error"] == "Aborted"


def test_cancel_without_wait_only_stops(fake: Fake) -> None:
    arn = _running_execution(fake, NEW)
    fake.seed_run(NEW, execution_arn=arn)
    result = runner.invoke(app, ["cancel", NEW, "--no-wait"])
    assert result.exit_code == 0, result.output
    assert "reaper" in result.stdout
    assert fake.stepfunctions.describe_execution(executionArn=arn)["status"] == "ABORTED"


def test_cancel_before_register_uses_the_execution_named_by_the_run(fake: Fake) -> None:
    arn = _running_execution(fake, NEW)
    assert arn == execution_arn(fake.deployment.state_machine_arn, NEW)
    document = _json(["cancel", NEW], 0)
    assert document["stopped"] is True
    assert "nothing to tear down" in document["note"]


def test_cancel_reports_teardown_that_never_happens(fake: Fake, no_sleep: Sleeper) -> None:
    fake.seed_run(NEW, execution_arn=_running_execution(fake, NEW))
    no_sleep(lambda: None)  # no reaper
    document = _json(["cancel", NEW, "--timeout", "1", "--interval", "0.05"], 1)
    assert document["status"] == "TRAINING"


def test_cancel_of_a_finished_run_is_refused(fake: Fake) -> None:
    fake.seed_run(OLD, status=RunStatus.SUCCEEDED)
    assert "already ended SUCCEEDED" in _json(["cancel", OLD], 1)["error"]


def test_cancel_of_an_unknown_run_points_at_runs(fake: Fake) -> None:
    result = runner.invoke(app, ["cancel", "nope-20261129T100000Z-00000000"])
    assert result.exit_code == 2
    assert "mtrl runs" in result.stderr


def test_cost_of_a_hyperpod_run_prices_its_gpu_holds(fake: Fake) -> None:
    held = {
        "instance_type": "ml.p5.48xlarge",
        "target_count": 2,
        "requested_at": "2026-11-29T10:00:00+00:00",
        "released_at": "2026-11-29T12:30:00+00:00",
    }
    fake.seed_run(OLD, backend="hyperpod", status=RunStatus.SUCCEEDED, cost={"usd": 1.0})
    fake.registry.update(
        OLD, lambda r: r["resources"].append({"kind": CAPACITY_KIND, "identifier": "c", "details": held}) or None
    )
    document = _json(["cost", OLD], 0)
    expected = cost_for_run(
        {
            "backend": "hyperpod",
            "region": "us-east-1",
            "gpu_holds": [
                {
                    "instance_type": "ml.p5.48xlarge",
                    "count": 2,
                    "start": held["requested_at"],
                    "end": held["released_at"],
                }
            ],
        }
    )
    assert document["total"] == expected.to_dict()["total"]
    assert float(document["total"]) > 0
    assert document["recorded_cost_usd"] == 1.0
    human = runner.invoke(app, ["cost", OLD])
    assert human.exit_code == 0
    assert "ml.p5.48xlarge" in human.stdout


def test_cost_of_a_local_run_is_zero_and_the_calculator_still_works(fake: Fake) -> None:
    fake.seed_run(OLD, status=RunStatus.SUCCEEDED)
    assert float(_json(["cost", OLD], 0)["total"]) == 0
    calculator = _json(["cost", "--region", "us-east-1", "--instance-type", "ml.p5.48xlarge", "--instances", "1"], 0)
    assert "lines" in calculator
    assert runner.invoke(app, ["cost"]).exit_code == 2
    assert runner.invoke(app, ["cost", OLD, "--model", "m"]).exit_code == 2


def test_cost_of_a_sagemaker_sessions_run_shows_its_tokens_and_the_break_even_against_verl(fake: Fake) -> None:
    # Issue 37 item 5: the per-token price has no source, so no cost is invented; the tokens and the break-even are.
    progress = {"service": "sagemaker", "token_usage": {"prefill": 600_000_000, "sample": 150_000_000, "train": 0}}
    fake.seed_run(OLD, status=RunStatus.SUCCEEDED, backend="sessions", progress=progress)
    document = _json(["cost", OLD], 0)
    assert document["backend"] == "sessions"
    assert document["sessions_cost_usd"] is None
    assert "unsourced" in document["sessions_unpriced"]
    assert document["tokens"]["total"] == 750_000_000
    assert document["verl_group"]["instance_type"] == "ml.g5.8xlarge"  # the training group cdk.json describes
    assert len(document["break_even_by_verl_hours"]) == 4
    human = runner.invoke(app, ["cost", OLD])
    assert human.exit_code == 0
    assert "sessions cost: unpriced" in human.stdout


def test_watch_reports_an_execution_that_ended_without_finalizing_the_run(
    fake: Fake, no_sleep: Sleeper, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mtrl.cli.runs_cmd.FINALIZE_GRACE_SECONDS", 0.0)
    arn = _running_execution(fake, NEW)
    fake.seed_run(NEW, execution_arn=arn)
    fake.stepfunctions.stop_execution(executionArn=arn)  # and no reaper finalizes the record
    no_sleep(lambda: None)
    view = _json(["status", NEW, "--watch"], 1)
    assert view["status"] == "ABORTED"
    assert "not finalized" in view["note"]


def test_submit_watch_gives_up_when_no_execution_starts(
    fake: Fake, no_sleep: Sleeper, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("mtrl.cli.runs_cmd.START_GRACE_SECONDS", 0.0)
    no_sleep(lambda: None)  # no trigger in moto: the upload never becomes an execution
    dataset = tmp_path / "w.jsonl"
    dataset.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:3]))
    result = runner.invoke(app, ["submit", str(dataset), "--watch"])
    assert result.exit_code == 1
    assert "no pipeline execution started" in result.stderr


def test_credential_rejections_say_what_to_do(fake: Fake) -> None:
    aws = Aws(Target(region="us-east-1"))
    expired = ClientError({"Error": {"Code": "ExpiredToken", "Message": "expired"}}, "DescribeStacks")
    with pytest.raises(CredentialsMissing, match="aws sso login"), translated_errors(aws):
        raise expired
    other = ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "DescribeStacks")
    with pytest.raises(ClientError), translated_errors(aws):
        raise other


def test_aws_region_alone_names_the_region(fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 24, friction 3: the CLI told the user to set AWS_REGION, then ignored it (boto3 reads AWS_DEFAULT_REGION).
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    result = runner.invoke(app, ["runs", "--json"])
    assert result.exit_code == 0, result.output
    monkeypatch.setenv("AWS_REGION", "eu-west-1")  # AWS_REGION wins over the default region, as for the AWS CLI
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    elsewhere = runner.invoke(app, ["runs", "--json"])
    assert elsewhere.exit_code == 2, elsewhere.output  # no deployment in eu-west-1
    assert "eu-west-1" in elsewhere.output
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    missing = runner.invoke(app, ["runs"])
    assert missing.exit_code == 2
    assert "AWS_REGION" in missing.output
    assert "--region" in runner.invoke(app, ["runs", "--help"]).output
