"""`mtrl cost --at-rest`: the deployment's monthly at-rest cost from its templates (issue 36 item 3)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from mtrl.cli import app

TEMPLATE = {
    "Resources": {
        "Nat": {"Type": "AWS::EC2::NatGateway", "Properties": {}},
        "Key": {"Type": "AWS::KMS::Key", "Properties": {}},
    }
}


def _cdk_out(tmp_path: Path) -> Path:
    out = tmp_path / "cdk.out"
    out.mkdir()
    (out / "mtrl-network.template.json").write_text(json.dumps(TEMPLATE))
    return out


def test_at_rest_prices_the_templates_resource_by_resource(tmp_path: Path) -> None:
    out = _cdk_out(tmp_path)
    result = CliRunner().invoke(
        app, ["cost", "--at-rest", "--region", "us-east-1", "--templates", str(out), "--json"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["region"] == "us-east-1"
    assert document["stacks"] == ["mtrl-network"]
    assert {line["item"]: line["amount"] for line in document["lines"]} == {
        "KMS key mtrl-network/Key": 1.0,
        "NAT gateway mtrl-network/Nat": 32.85,
    }
    assert document["total"] == 33.85
    table = CliRunner().invoke(app, ["cost", "--at-rest", "--region", "us-east-1", "--templates", str(out)])
    assert table.exit_code == 0
    assert "33.85" in table.output


def test_at_rest_refuses_a_region_without_prices(tmp_path: Path) -> None:
    out = _cdk_out(tmp_path)
    result = CliRunner().invoke(app, ["cost", "--at-rest", "--region", "eu-west-1", "--templates", str(out)])
    assert result.exit_code != 0
    assert "no at-rest prices for region 'eu-west-1'" in result.output


def test_at_rest_takes_no_run_options(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["cost", "--at-rest", "--model", "gpt-oss-20b"])
    assert result.exit_code != 0
    assert "--at-rest prices the deployment" in result.output
    result = CliRunner().invoke(app, ["cost", "--model", "gpt-oss-20b", "-c", "az_count=2"])
    assert "-c and --templates go with --at-rest" in result.output


def test_at_rest_without_an_app_says_where_to_run(tmp_path: Path) -> None:
    (tmp_path / "cdk.json").write_text(json.dumps({"context": {}}))
    result = CliRunner().invoke(
        app, ["cost", "--at-rest", "--region", "us-east-1", "--cdk-json", str(tmp_path / "cdk.json")]
    )
    assert result.exit_code != 0
    assert "no CDK app at" in result.output


def test_at_rest_synthesizes_the_app_offline_with_the_overrides() -> None:
    # The real app, synthesized as `npx cdk synth` runs it (no credentials, no Docker), with a -c override: the
    # serverless profile has no cluster stack and meets its goal of USD 10 a month.
    result = CliRunner().invoke(
        app,
        ["cost", "--at-rest", "--region", "us-east-1", "-c", "deployment_profile=serverless", "--json"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert "mtrl-cluster" not in document["stacks"]
    assert {"mtrl-network", "mtrl-pipeline", "mtrl-data"} <= set(document["stacks"])
    assert 0 < document["total"] <= 10
    assert not any(line["item"].startswith(("NAT gateway", "EKS control plane")) for line in document["lines"])
