"""The trigger's decisions and the handlers' error mapping (moto S3 / Step Functions, no execution)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from mtrl.runs import lambda_support
from mtrl.runs.errors import InternalError, TransientError
from mtrl.runs.manifest import MAX_MANIFEST_BYTES
from mtrl.runs.runtime import Runtime
from mtrl.runs.trigger import handle_upload
from mtrl.settings.pipeline import PipelineSettings

BUCKET = "data"
ASL = {"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}


@pytest.fixture
def runtime() -> Iterator[Runtime]:
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        sfn = boto3.client("stepfunctions", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        arn = sfn.create_state_machine(
            name="m", definition=json.dumps(ASL), roleArn="arn:aws:iam::123456789012:role/r"
        )["stateMachineArn"]
        yield Runtime(
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
    assert given["manifest_text"] == '{"instance_count": 2}'
    assert given["manifest_ref"]["uri"] == f"s3://{BUCKET}/training-data/a.run.json"


@pytest.mark.parametrize(
    ("manifest", "problem"),
    [(b"x" * (MAX_MANIFEST_BYTES + 1), "larger than"), (b"\xff\xfe{}", "not UTF-8")],
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
