"""The trigger's decisions and the handlers' error mapping (moto S3 / Step Functions, no execution)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from mtrl.contracts.errors import InternalError, TransientError
from mtrl.runs import lambda_support
from mtrl.runs.manifest import MAX_MANIFEST_BYTES
from mtrl.runs.runtime import Runtime
from mtrl.runs.trigger import handle_upload
from mtrl.settings.pipeline import PipelineSettings
from tests.aws_fixtures import create_versioned_bucket
from tests.run_table import create_run_table

BUCKET = "data"
ASL = {"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}


@pytest.fixture
def runtime(mocked_aws: None) -> Runtime:
    s3 = boto3.client("s3", region_name="us-east-1")
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    create_versioned_bucket(s3, BUCKET)
    arn = sfn.create_state_machine(name="m", definition=json.dumps(ASL), roleArn="arn:aws:iam::123456789012:role/r")[
        "stateMachineArn"
    ]
    return Runtime(
        dynamodb=None,
        s3=s3,
        table="t",
        bucket=BUCKET,
        settings=PipelineSettings.model_validate({}),
        stepfunctions=sfn,
        state_machine_arn=arn,
    )


def event(key: str, version: str | None, bucket: str = BUCKET) -> dict[str, Any]:
    return {
        "source": "aws.s3",
        "detail-type": "Object Created",
        "detail": {"bucket": {"name": bucket}, "object": {"key": key, "version-id": version}},
    }


def put(runtime: Runtime, key: str, body: bytes = b'{"id": "a"}\n') -> str:
    return str(runtime.s3.put_object(Bucket=BUCKET, Key=key, Body=body)["VersionId"])


def started_input(runtime: Runtime) -> dict[str, Any]:
    (execution,) = runtime.stepfunctions.list_executions(stateMachineArn=runtime.state_machine_arn)["executions"]
    description = runtime.stepfunctions.describe_execution(executionArn=execution["executionArn"])
    return dict(json.loads(description["input"]))


def test_upload_starts_one_named_execution(runtime: Runtime) -> None:
    version = put(runtime, "training-data/wordle.jsonl")
    result = handle_upload(runtime, event("training-data/wordle.jsonl", version))
    assert result["status"] == "STARTED"
    assert result["execution_arn"].endswith(":" + result["run_id"])
    given = started_input(runtime)
    assert given["run_id"] == result["run_id"]
    assert given["version_id"] == version
    assert given["size"] == len(b'{"id": "a"}\n')
    assert "manifest_text" not in given


def test_an_event_without_a_version_id_is_named_after_the_version_read(runtime: Runtime) -> None:
    from mtrl.runs.ids import derive_run_id

    version = put(runtime, "training-data/noversion.jsonl")
    result = handle_upload(runtime, event("training-data/noversion.jsonl", None))
    head = runtime.s3.head_object(Bucket=BUCKET, Key="training-data/noversion.jsonl")
    expected = derive_run_id(
        bucket=BUCKET, key="training-data/noversion.jsonl", version_id=version, created=head["LastModified"]
    )
    assert result["run_id"] == expected
    assert started_input(runtime)["version_id"] == version


@pytest.mark.parametrize(
    ("key", "bucket"),
    [
        ("training-data/x.run.json", BUCKET),
        ("eval-data/x.jsonl", BUCKET),
        ("runs/r/summary.jsonl", BUCKET),
        ("training-data/x.jsonl", "someone-elses-bucket"),
    ],
)
def test_other_objects_start_nothing(runtime: Runtime, key: str, bucket: str) -> None:
    assert handle_upload(runtime, event(key, "v", bucket))["status"] == "IGNORED"


def test_a_version_that_is_gone_starts_nothing(runtime: Runtime) -> None:
    put(runtime, "training-data/gone.jsonl")
    result = handle_upload(runtime, event("training-data/gone.jsonl", "no-such-version"))
    assert result["status"] == "IGNORED"
    assert "no longer exists" in result["reason"]


def test_url_encoded_keys_are_understood(runtime: Runtime) -> None:
    version = put(runtime, "training-data/my data.jsonl")
    assert handle_upload(runtime, event("training-data/my+data.jsonl", version))["status"] == "STARTED"
    assert started_input(runtime)["key"] == "training-data/my data.jsonl"


def test_manifest_is_passed_along_and_problems_are_named(runtime: Runtime) -> None:
    put(runtime, "training-data/a.run.json", b'{"instance_count": 2}')
    version = put(runtime, "training-data/a.jsonl")
    handle_upload(runtime, event("training-data/a.jsonl", version))
    given = started_input(runtime)
    assert given["manifest"] == {"instance_count": 2}
    assert given["manifest_ref"]["uri"] == f"s3://{BUCKET}/training-data/a.run.json"


@pytest.mark.parametrize(
    ("manifest", "problem"),
    [
        (b"x" * (MAX_MANIFEST_BYTES + 1), "larger than"),
        (b"\xff\xfe{}", "not UTF-8"),
        # Broken documents are refused here, line-numbered, instead of travelling in the execution input.
        (b'{\n  "max_budget_usd": Infinity\n}', "line 2 column 21: Infinity is not a finite number"),
        (b'{"instance_count": 1,\n"instance_count": 8}', "line 2 column 1: duplicate key 'instance_count'"),
        (b"[" * 30_000 + b"]" * 30_000, "nested more than 16 levels deep"),
        (b"\x01" * 60_000, "line 1 column 1: Expecting value"),  # would be 360 KB escaped in the input
    ],
)
def test_unreadable_manifests_become_errors(runtime: Runtime, manifest: bytes, problem: str) -> None:
    put(runtime, "training-data/b.run.json", manifest)
    version = put(runtime, "training-data/b.jsonl")
    handle_upload(runtime, event("training-data/b.jsonl", version))
    assert problem in started_input(runtime)["manifest_error"]


def test_redelivery_while_running_reuses_the_execution(runtime: Runtime) -> None:
    version = put(runtime, "training-data/c.jsonl")
    first = handle_upload(runtime, event("training-data/c.jsonl", version))
    again = handle_upload(runtime, event("training-data/c.jsonl", version))
    assert again["execution_arn"] == first["execution_arn"]  # same name + same input: Step Functions' idempotency
    assert len(runtime.stepfunctions.list_executions(stateMachineArn=runtime.state_machine_arn)["executions"]) == 1


# -- error mapping in the handler wrapper --------------------------------------------------------------------
def _throttled(_runtime: Any, _event: Any) -> dict[str, Any]:
    raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "PutItem")


def _denied(_runtime: Any, _event: Any) -> dict[str, Any]:
    raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "PutItem")


def _bug(_runtime: Any, _event: Any) -> dict[str, Any]:
    raise KeyError("missing")


@pytest.fixture
def no_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lambda_support, "runtime_from_env", lambda: None)


@pytest.mark.usefixtures("no_runtime")
@pytest.mark.parametrize(
    ("phase", "error", "text"),
    [
        (_throttled, TransientError, "ThrottlingException"),
        (_denied, InternalError, "AccessDenied"),
        (_bug, InternalError, "KeyError"),
    ],
)
def test_errors_are_typed_and_name_the_run(phase: Any, error: type[Exception], text: str) -> None:
    with pytest.raises(error) as raised:
        lambda_support.invoke(phase, {"run_id": "run-42", "action": "x"})
    assert "run-42" in str(raised.value)
    assert text in str(raised.value)


@pytest.mark.usefixtures("no_runtime")
def test_dispatch_rejects_unknown_actions() -> None:
    handler = lambda_support.dispatch({"status": lambda _r, _e: {"ok": True}})
    assert lambda_support.invoke(handler, {"run_id": "r", "action": "status"}) == {"ok": True}
    with pytest.raises(InternalError, match="unknown action 'launch'"):
        lambda_support.invoke(handler, {"run_id": "r", "action": "launch"})


@pytest.mark.parametrize(
    "bad_event",
    [
        {},
        {"detail": "training-data/a.jsonl"},
        {"detail": {"bucket": ["data"], "object": {"key": "training-data/a.jsonl"}}},
        {"detail": {"bucket": {"name": BUCKET}, "object": ["training-data/a.jsonl"]}},
        {"detail": {"bucket": {"name": BUCKET}, "object": {"key": 7}}},
        {"detail": {"bucket": {"name": BUCKET}, "object": {"key": "training-data/a.jsonl", "version-id": 3}}},
    ],
)
def test_malformed_events_are_named_errors_not_tracebacks(runtime: Runtime, bad_event: dict[str, Any]) -> None:
    with pytest.raises(InternalError, match=r"Object Created event|version-id must be a string"):
        handle_upload(runtime, bad_event)
    assert isinstance(lambda_support._run_id_of(bad_event), str)  # the log key of a bad event, never a crash


def test_register_answers_a_non_finite_budget_with_a_line_numbered_error(runtime: Runtime) -> None:
    # Before: Infinity became float('inf'), passed gt=0, and the run record write failed with DynamoDB's
    # "Float types are not supported" (a TypeError, i.e. an internal error without the manifest's line).
    # The trigger parses the manifest; Register refuses the run with what the parse found.
    from mtrl.contracts.errors import ConfigurationError
    from mtrl.runs.pipeline import register

    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    create_run_table(dynamodb, "runs")
    runtime = dataclasses.replace(runtime, dynamodb=dynamodb, table="runs")
    for index, (text, problem) in enumerate(
        [
            ('{\n  "max_budget_usd": Infinity\n}', "line 2 column 21: Infinity is not a finite number"),
            ('{"max_budget_usd": 1e999}', "line 1 column 20: 1e999 is not a finite number"),
            ('{"environment_args": {"k": "\\ud800"}}', "lone UTF-16 surrogate"),
            ('{"environment_args": ' + "[" * 40 + "]" * 40 + "}", "nested more than 16 levels deep"),
        ]
    ):
        put(runtime, f"training-data/x{index}.run.json", text.encode())
        started = handle_upload(
            runtime, event(f"training-data/x{index}.jsonl", put(runtime, f"training-data/x{index}.jsonl"))
        )
        described = runtime.stepfunctions.describe_execution(executionArn=started["execution_arn"])
        state = json.loads(described["input"])
        run_id = started["run_id"]
        with pytest.raises(ConfigurationError) as raised:
            register(runtime, {"run_id": run_id, "execution_arn": started["execution_arn"], "state": state})
        assert problem in str(raised.value)
        assert f"run {run_id}: manifest s3://{BUCKET}/training-data/x{index}.run.json" in str(raised.value)


def test_register_answers_every_key_its_result_selector_reads_for_a_duplicate_delivery_too(mocked_aws: None) -> None:
    # Step Functions fails a Task whose ResultSelector names a path the result lacks (States.Runtime,
    # "Input and output processing" in the Step Functions developer guide). Register's duplicate branch used
    # to answer only {"duplicate": true}: the duplicate execution would have failed at Register, and its Catch
    # (RegisterFailed → Teardown → Report) would have torn down and reported a run another execution owns.
    from pathlib import Path

    from mtrl.runs.pipeline import register

    asl = json.loads((Path(__file__).resolve().parents[3] / "statemachine" / "pipeline.asl.json").read_text())
    selector = asl["States"]["Register"]["ResultSelector"]
    read = {path.removeprefix("$.Payload.") for key, path in selector.items() if key.endswith(".$")}
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    create_run_table(dynamodb, "runs")
    runtime = Runtime(dynamodb=dynamodb, s3=None, table="runs", bucket=BUCKET, settings=PipelineSettings())
    state = {"bucket": BUCKET, "key": "training-data/x.jsonl", "created_at": "2026-11-29T10:30:05Z"}
    first = register(runtime, {"run_id": "r1", "execution_arn": "arn:first", "state": state})
    again = register(runtime, {"run_id": "r1", "execution_arn": "arn:second", "state": state})
    assert first["duplicate"] is False
    assert again["duplicate"] is True
    assert read <= set(first), sorted(read - set(first))
    assert read <= set(again), sorted(read - set(again))
    assert again["evaluate"] is False
    assert again["baseline"] is False
