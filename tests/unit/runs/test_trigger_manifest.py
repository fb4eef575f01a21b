"""The manifest is parsed once on the server side, by the trigger where it enters; Register resolves the settings from
that document and never parses it again (moto S3, Step Functions and DynamoDB; the real trigger and Register)."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from mtrl.contracts.errors import ConfigurationError
from mtrl.runs.manifest import MAX_MANIFEST_BYTES, parse_manifest
from mtrl.runs.phases import register as register_phase
from mtrl.runs.runtime import Runtime
from mtrl.runs.trigger import handle_upload
from mtrl.settings.pipeline import PipelineSettings
from tests.aws_fixtures import create_versioned_bucket
from tests.run_table import create_run_table

BUCKET = "data"
ASL = {"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}
# StartExecution's ``input`` (Step Functions API reference): "Length constraints apply to the payload size, and are
# expressed as bytes in UTF-8 encoding", maximum length 262144; every state's input has the same limit.
MAX_EXECUTION_INPUT_BYTES = 256 * 1024


@pytest.fixture
def runtime(mocked_aws: None) -> Runtime:
    s3 = boto3.client("s3", region_name="us-east-1")
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    create_run_table(dynamodb, "runs")
    create_versioned_bucket(s3, BUCKET)
    arn = sfn.create_state_machine(name="m", definition=json.dumps(ASL), roleArn="arn:aws:iam::123456789012:role/r")[
        "stateMachineArn"
    ]
    return Runtime(
        dynamodb=dynamodb,
        s3=s3,
        table="runs",
        bucket=BUCKET,
        settings=PipelineSettings.model_validate({}),
        stepfunctions=sfn,
        state_machine_arn=arn,
    )


def upload(runtime: Runtime, name: str, manifest: bytes) -> tuple[dict[str, Any], str]:
    """Put manifest and dataset, deliver the upload event; (the execution's input as UTF-8 text, run id)."""
    runtime.s3.put_object(Bucket=BUCKET, Key=f"training-data/{name}.run.json", Body=manifest)
    version = runtime.s3.put_object(Bucket=BUCKET, Key=f"training-data/{name}.jsonl", Body=b'{"id": "a"}\n')
    event = {
        "detail": {
            "bucket": {"name": BUCKET},
            "object": {"key": f"training-data/{name}.jsonl", "version-id": version["VersionId"]},
        }
    }
    started = handle_upload(runtime, event)
    description = runtime.stepfunctions.describe_execution(executionArn=started["execution_arn"])
    return {"input": description["input"]}, started["run_id"]


def test_the_trigger_passes_the_parsed_document_and_register_never_parses_again(runtime: Runtime) -> None:
    text = b'{\n  "instance_count": 2,\n  "eval_split": 0.125,\n  "environment_args": {"words": ["caf\xc3\xa9"]}\n}'
    described, run_id = upload(runtime, "a", text)
    state = json.loads(described["input"])
    assert state["manifest"] == parse_manifest(text, source="m")
    assert "manifest_text" not in state  # the parsed document travels once; Register has no parser to call
    assert not hasattr(register_phase, "parse_manifest")
    answer = register_phase.register(runtime, {"run_id": run_id, "execution_arn": "arn:e", "state": state})
    settings = runtime.registry.get(run_id)["settings"]
    assert (settings["instance_count"], settings["eval_split"]) == (2, 0.125)
    assert settings["environment_args"] == {"words": ["café"]}
    assert answer["evaluate"] is True


@pytest.mark.parametrize("document", [[1, 2], "text", 7, None])
def test_a_manifest_document_that_is_not_an_object_is_refused_naming_the_run(runtime: Runtime, document: Any) -> None:
    state = {
        "bucket": BUCKET,
        "key": "training-data/x.jsonl",
        "created_at": "2026-12-02T01:00:00Z",
        "manifest_ref": {"uri": f"s3://{BUCKET}/training-data/x.run.json"},
        "manifest": document,
    }
    with pytest.raises(ConfigurationError) as raised:
        register_phase.register(runtime, {"run_id": "odd-1", "execution_arn": "arn:e", "state": state})
    assert str(raised.value) == (
        f"run odd-1: manifest s3://{BUCKET}/training-data/x.run.json must be a JSON object of settings"
    )
    assert "settings" not in runtime.registry.get("odd-1")


def _fill(prefix: bytes, unit: bytes, suffix: bytes) -> bytes:
    count = (MAX_MANIFEST_BYTES - len(prefix) - len(suffix)) // len(unit)
    return prefix + unit * count + suffix


@pytest.mark.parametrize(
    ("name", "manifest"),
    [
        # Each is a valid manifest document of (nearly) the largest size the trigger accepts, chosen to grow the most
        # when written into the execution input twice (as text: every quote and backslash escaped; as a document).
        ("emoji", _fill(b'{"environment_args": {"k": "', "\U0001f600".encode(), b'"}}')),
        ("backslashes", _fill(b'{"environment_args": {"k": "', b"\\\\", b'"}}')),
        ("quotes", _fill(b'{"environment_args": {"k": "', b'\\"', b'"}}')),
        ("empty strings", _fill(b'{"environment_args": {"k": [""', b',""', b"]}}")),
        ("control characters", _fill(b'{"environment_args": {"k": "', b"\\u0001", b'"}}')),
    ],
)
def test_the_largest_manifests_keep_the_execution_input_within_step_functions_limit(
    runtime: Runtime, name: str, manifest: bytes
) -> None:
    assert len(manifest) <= MAX_MANIFEST_BYTES
    parse_manifest(manifest, source=name)  # a document the trigger accepts
    described, _ = upload(runtime, name.replace(" ", "-"), manifest)
    size = len(described["input"].encode("utf-8"))
    assert size < MAX_EXECUTION_INPUT_BYTES, f"{name}: {size} bytes"
    assert "manifest_error" not in json.loads(described["input"])
