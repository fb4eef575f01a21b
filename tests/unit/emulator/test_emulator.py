"""Smoke test of the embedded emulator: start, health, deploy a tiny synthesized-style app with a Lambda asset, stop.

Skipped (with the reason) only when ``.venv-emulator`` is absent; ``make test`` creates it first, so CI runs it.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import boto3
import pytest

from mtrl.backends._aws import AwsClients
from mtrl.backends.local import LocalAdapter
from mtrl.contracts.backend import JobState, RunContext
from mtrl.emulator import Emulator, deploy_app, find_emulator
from mtrl.emulator.deploy import session_for, stack_order
from mtrl.envs.registry import load_spec

pytestmark = pytest.mark.skipif(
    find_emulator() is None, reason="emulator not installed: run `make emulator` to create .venv-emulator"
)

ASSET = "a" * 64
HANDLER = "def handler(event, context):\n    return {'echo': event.get('word', '').upper()}\n"


def _tiny_cdk_out(root: Path) -> Path:
    """A cdk.out as `cdk synth` writes it: manifest, asset manifest, a zip-packaged directory asset, a template."""
    out = root / "cdk.out"
    (out / f"asset.{ASSET}").mkdir(parents=True)
    (out / f"asset.{ASSET}" / "index.py").write_text(HANDLER)
    destination = {
        "bucketName": "cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}",
        "objectKey": f"{ASSET}.zip",
    }
    (out / "tiny.assets.json").write_text(
        json.dumps(
            {
                "version": "55.0.0",
                "files": {
                    ASSET: {
                        "source": {"path": f"asset.{ASSET}", "packaging": "zip"},
                        "destinations": {"d": destination},
                    }
                },
                "dockerImages": {},
            }
        )
    )
    template: dict[str, Any] = {
        "Resources": {
            "Bucket": {"Type": "AWS::S3::Bucket", "Properties": {"VersioningConfiguration": {"Status": "Enabled"}}},
            "Role": {
                "Type": "AWS::IAM::Role",
                "Properties": {
                    "AssumeRolePolicyDocument": {
                        "Version": "2012-10-17",
                        "Statement": [
                            {
                                "Effect": "Allow",
                                "Principal": {"Service": "lambda.amazonaws.com"},
                                "Action": "sts:AssumeRole",
                            }
                        ],
                    }
                },
            },
            "Echo": {
                "Type": "AWS::Lambda::Function",
                "Properties": {
                    "Runtime": "python3.12",
                    "Handler": "index.handler",
                    "Role": {"Fn::GetAtt": ["Role", "Arn"]},
                    "Code": {
                        "S3Bucket": {"Fn::Sub": "cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}"},
                        "S3Key": f"{ASSET}.zip",
                    },
                },
            },
        },
        "Outputs": {"BucketName": {"Value": {"Ref": "Bucket"}}, "FunctionName": {"Value": {"Ref": "Echo"}}},
    }
    (out / "tiny.template.json").write_text(json.dumps(template))
    rejected = {"Resources": {"Ip": {"Type": "AWS::EC2::EIP", "Properties": {"Domain": "vpc"}}}}
    (out / "unsupported.template.json").write_text(json.dumps(rejected))
    stack = {"type": "aws:cloudformation:stack", "properties": {"templateFile": "tiny.template.json"}}
    (out / "manifest.json").write_text(
        json.dumps(
            {
                "version": "55.0.0",
                "artifacts": {
                    "tiny.assets": {"type": "cdk:asset-manifest", "properties": {"file": "tiny.assets.json"}},
                    "tiny": {**stack, "dependencies": ["tiny.assets"]},
                    "unsupported": {
                        "type": "aws:cloudformation:stack",
                        "properties": {"templateFile": "unsupported.template.json"},
                        "dependencies": ["tiny"],
                    },
                },
            }
        )
    )
    return out


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_start_deploy_invoke_and_stop(tmp_path: Path) -> None:
    cdk_out = _tiny_cdk_out(tmp_path)
    assert stack_order(cdk_out) == [("tiny", "tiny"), ("unsupported", "unsupported")]
    emulator = Emulator()
    with emulator:
        assert emulator.healthy()
        assert emulator.endpoint_url.startswith("http://127.0.0.1:")
        session = session_for(emulator.client_kwargs)
        tiny, unsupported = deploy_app(session, cdk_out, stop_on_failure=False)
        assert tiny.status == "CREATE_COMPLETE", tiny.failures
        assert tiny.assets_published == 1
        bucket, function = tiny.outputs["BucketName"], tiny.outputs["FunctionName"]
        s3 = session.client("s3")
        assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
        # The Lambda runs the code from the published zip asset: asset packaging and keys are right.
        reply = session.client("lambda").invoke(FunctionName=function, Payload=json.dumps({"word": "crane"}))
        assert json.loads(reply["Payload"].read()) == {"echo": "CRANE"}
        # An unsupported resource type is reported with the emulator's reason, not raised.
        assert unsupported.status == "REJECTED"
        assert "AWS::EC2::EIP" in unsupported.failures[0]
        [again] = deploy_app(session, cdk_out, stacks=["tiny"])  # a second deploy updates in place
        assert again.ok, (again.status, again.failures)
        assert again.outputs["FunctionName"] == function
        ssm = session.client("ssm")
        assert ssm.get_parameter(Name="/cdk-bootstrap/hnb659fds/version")["Parameter"]["Value"]
        port = emulator.port
    assert not emulator.running
    assert not _port_open(port)


def test_local_backend_runs_against_the_emulator_s3(monkeypatch: pytest.MonkeyPatch) -> None:
    """The local backend's S3 state store against the emulator's S3 (its error codes, not moto's), end to end."""
    with Emulator() as emulator:
        for name, value in {"AWS_ENDPOINT_URL": emulator.endpoint_url, "AWS_ACCESS_KEY_ID": "test"}.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
        session = boto3.Session(region_name="us-east-1")
        s3 = session.client("s3")
        s3.create_bucket(Bucket="demo-data")
        sample = load_spec("wordle").path / "sample"
        lines = sample.joinpath("train.jsonl").read_text().splitlines()
        s3.put_object(Bucket="demo-data", Key="training-data/w.jsonl", Body="\n".join(lines[:20]).encode())
        run = RunContext(
            run_id="w-1",
            settings={
                "environment": "wordle",
                "environment_args": {"verbose": False},
                "hyperparameters": {"steps": 1, "tasks_per_step": 2, "group_size": 3, "eval_tasks": 3},
            },
            dataset_uri="s3://demo-data/training-data/w.jsonl",
            eval_dataset_uri=None,
            output_uri="s3://demo-data/runs/w-1/",
        )
        adapter = LocalAdapter(clients=AwsClients(session))
        job = adapter.submit(run)
        status = adapter.status(run, job)
        assert status.state is JobState.SUCCEEDED, status.message
        keys = {item["Key"] for item in s3.list_objects_v2(Bucket="demo-data", Prefix="runs/w-1/")["Contents"]}
        assert {"runs/w-1/local/summary.json", "runs/w-1/local/training.png", "runs/w-1/local/state.json"} <= keys
