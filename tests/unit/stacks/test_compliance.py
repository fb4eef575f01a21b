"""Every synthesized template: cdk-nag clean with narrow acknowledgments, cfn-lint clean, real AZs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3

from stacks.app_builder import Deployment
from stacks.nag import acknowledge, enable_checks
from tests.unit.stacks.template_tools import cfn_lint

ACKNOWLEDGED = "aws:cdk:acknowledged-rules"


def _templates(assembly: cdk.cx_api.CloudAssembly) -> dict[str, dict[str, Any]]:
    return {stack.stack_name: stack.template for stack in assembly.stacks}


def test_default_app_has_no_unacknowledged_nag_findings(synthesized: tuple[Deployment, Any]) -> None:
    # The session synth raises on any unacknowledged finding; the report must also be clean.
    _, assembly = synthesized
    report = json.loads((Path(assembly.directory) / "validation-report.json").read_text())
    failures = [r for r in report["pluginReports"] if r["conclusion"] != "success" and r["violations"]]
    assert failures == []


def test_acknowledgments_are_never_attached_to_an_app_stage_or_stack(synthesized: tuple[Deployment, Any]) -> None:
    deployment, _ = synthesized
    app = deployment.data.node.root
    acknowledged_on: list[str] = []
    for construct in app.node.find_all():
        for entry in construct.node.metadata:
            if entry.type != ACKNOWLEDGED:
                continue
            # CDK acknowledges some of its own lint warnings (e.g. W3010) on stacks; only nag ones are ours.
            ours = {rule: reason for rule, reason in dict(entry.data).items() if "AwsSolutions" in rule}
            if not ours:
                continue
            assert not isinstance(construct, cdk.Stack | cdk.Stage), f"acknowledgment on {construct.node.path}"
            assert all(len(reason) >= 20 for reason in ours.values())
            acknowledged_on.append(construct.node.path)
    assert acknowledged_on, "expected at least the access-log bucket's S1 acknowledgment"


def test_acknowledge_refuses_stacks() -> None:
    app = cdk.App()
    stack = cdk.Stack(app, "Whole")
    with pytest.raises(ValueError, match="not on Whole"):
        acknowledge(stack, "AwsSolutions-S1", "a long enough reason that would otherwise be accepted")


def test_nag_plugin_is_active_and_fails_synth_on_a_finding(tmp_path: Path) -> None:
    # Guards against the checks silently not running (e.g. a cdk-nag API change).
    # aws-cdk-lib's own CloudFormation check only warns, and this is about cdk-nag: starting its engine would cost
    # about 10 CPU-s (tests/conftest.py make_app).
    app = cdk.App(outdir=str(tmp_path), builtin_cloud_formation_validation=False)
    stack = cdk.Stack(app, "Insecure")
    s3.Bucket(stack, "NoTls")
    enable_checks(app)
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    rules = {v["ruleName"] for r in report["pluginReports"] for v in r["violations"]}
    assert {"AwsSolutions-S1", "AwsSolutions-S10"} <= rules


def test_cfn_lint_reports_no_errors_or_warnings(synthesized: tuple[Deployment, Any]) -> None:
    _, assembly = synthesized
    problems: list[str] = []
    for name, template in _templates(assembly).items():
        for match in cfn_lint(template):  # W3005 ignored (template_tools.CFN_LINT_CONFIG)
            problems.append(f"{name}: {match.rule.id} {match.message} at {'/'.join(map(str, match.path))}")
    assert problems == []


def test_subnets_use_real_availability_zones(synthesized: tuple[Deployment, Any]) -> None:
    _, assembly = synthesized
    for template in _templates(assembly).values():
        for resource in template["Resources"].values():
            if resource["Type"] == "AWS::EC2::Subnet":
                assert not str(resource["Properties"]["AvailabilityZone"]).startswith("dummy")


def test_every_stack_is_tagged_with_the_deployment(synthesized: tuple[Deployment, Any]) -> None:
    _, assembly = synthesized
    assert {s.stack_name for s in assembly.stacks} >= {"mtrl-data", "mtrl-network"}
    for stack in assembly.stacks:
        assert stack.tags.get("mtrl:deployment") == "mtrl"


def test_prefix_names_every_stack(tmp_path: Path) -> None:
    from tests.conftest import make_app

    app, _ = make_app({"prefix": "team-b"}, outdir=tmp_path)
    names = {s.stack_name for s in app.synth().stacks}
    assert names >= {"team-b-data", "team-b-network"}
    assert all(name.startswith("team-b-") for name in names)
