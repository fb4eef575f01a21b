"""Deployment discovery from stack outputs, and the errors that say what to do."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from mtrl.cli import app
from mtrl.client.deployment import Aws, OutputMissing, StackNotFound, Target, discover, execution_arn
from mtrl.client.runs import LISTING_INDEX
from tests.unit.client.conftest import LOG_GROUPS, Fake

runner = CliRunner()


def test_discover_reads_every_output(fake: Fake) -> None:
    found = discover(Aws(Target(region="us-east-1")), "mtrl")
    assert found == fake.deployment
    assert found.log_groups == LOG_GROUPS


def test_a_missing_stack_is_named_with_prefix_and_region(fake: Fake) -> None:
    with pytest.raises(StackNotFound, match=r"stack 'other-data' not found in region us-east-1 \(prefix 'other'\)"):
        discover(Aws(Target(region="us-east-1")), "other")
    result = runner.invoke(app, ["runs", "--prefix", "other", "--json"])
    assert result.exit_code == 2
    assert "other-data" in json.loads(result.stdout)["error"]


def test_a_missing_output_names_the_stack_and_output(fake: Fake) -> None:
    fake.add_stack("old-data", {"DataBucketName": "b", "RunTableName": "t"})
    fake.add_stack("old-pipeline", {"NotificationTopicArn": "arn:aws:sns:us-east-1:123456789012:t"})
    with pytest.raises(OutputMissing, match="stack 'old-pipeline' has no output StateMachineArn"):
        discover(Aws(Target(region="us-east-1")), "old")


def test_no_credentials_says_so(fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    result = runner.invoke(app, ["runs"])
    assert result.exit_code == 2
    assert "no AWS credentials found" in result.stderr


def test_an_unknown_profile_is_a_configuration_error(fake: Fake) -> None:
    result = runner.invoke(app, ["status", "x", "--profile", "nope", "--json"])
    assert result.exit_code == 2
    assert "profile 'nope' is not configured" in json.loads(result.stdout)["error"]


def test_no_region_says_how_to_give_one(fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    result = runner.invoke(app, ["runs"])
    assert result.exit_code == 2
    assert "pass --region" in result.stderr


def test_endpoint_url_reaches_every_client(fake: Fake) -> None:
    aws = Aws(Target(region="us-east-1", endpoint_url="http://127.0.0.1:4566"))
    for service in ("s3", "dynamodb", "stepfunctions", "logs", "cloudformation"):
        assert aws.client(service).meta.endpoint_url == "http://127.0.0.1:4566"


def test_execution_arn_of_a_run() -> None:
    machine = "arn:aws:states:us-east-1:123456789012:stateMachine:mtrl-run"
    assert execution_arn(machine, "r-1") == "arn:aws:states:us-east-1:123456789012:execution:mtrl-run:r-1"
    with pytest.raises(ValueError, match="not a state machine ARN"):
        execution_arn("arn:aws:sns:us-east-1:1:topic", "r")


def test_listing_index_matches_the_data_stack() -> None:
    from stacks.constructs.data_store import RUN_TABLE_LISTING_INDEX

    assert LISTING_INDEX == RUN_TABLE_LISTING_INDEX
