"""Smoke test of the embedded emulator: start, health, deploy a tiny synthesized-style app with a Lambda asset, stop.

Skipped (with the reason) only when ``.venv-emulator`` is absent; ``make test`` creates it first, so CI runs it.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from mtrl.emulator import Emulator, deploy_app, find_emulator
from mtrl.emulator.deploy import session_for, stack_order

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
        ssm = session.client("ssm")
        assert ssm.get_parameter(Name="/cdk-bootstrap/hnb659fds/version")["Parameter"]["Value"]
        port = emulator.port
    assert not emulator.running
    assert not _port_open(port)
