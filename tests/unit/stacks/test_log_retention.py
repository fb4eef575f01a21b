"""Every log group the stacks create expires, and every Lambda function logs to one of them (issue 36, item 5).

A function without ``LoggingConfig.LogGroup`` logs to ``/aws/lambda/<name>``, which Lambda creates on first use:
outside the stack, unencrypted and kept forever (CloudWatch Logs' default retention is "never expire"; Lambda
developer guide, "Configuring advanced logging controls": LoggingConfig.LogGroup). The handlers CDK adds for its own
custom resources (bucket deployments, S3 auto-delete, the VPC's default security group) are such functions.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3

from mtrl.settings.aws_facts import LOG_RETENTION_DAYS
from stacks.app_builder import Deployment
from stacks.constructs.encrypted_log_group import give_every_function_a_log_group


def _templates(assembly: cdk.cx_api.CloudAssembly) -> dict[str, dict[str, Any]]:
    return {stack.stack_name: stack.template for stack in assembly.stacks}


def retention_problems(templates: dict[str, dict[str, Any]]) -> list[str]:
    problems = []
    for stack, template in templates.items():
        resources = template.get("Resources", {})
        groups = {lid for lid, r in resources.items() if r["Type"] == "AWS::Logs::LogGroup"}
        for lid in groups:
            days = resources[lid].get("Properties", {}).get("RetentionInDays")
            if days not in LOG_RETENTION_DAYS:
                problems.append(f"{stack}/{lid}: RetentionInDays {days!r}")
        for lid, resource in resources.items():
            if resource["Type"] != "AWS::Lambda::Function":
                continue
            target = resource.get("Properties", {}).get("LoggingConfig", {}).get("LogGroup")
            if not (isinstance(target, dict) and target.get("Ref") in groups):
                problems.append(f"{stack}/{lid}: logs to {target!r}, not a log group of its stack")
    return problems


def test_every_log_group_of_the_default_deployment_expires(
    synthesized: tuple[Deployment, cdk.cx_api.CloudAssembly],
) -> None:
    templates = _templates(synthesized[1])
    assert len(templates) == 6  # data, network, cluster, reward workers, backends, pipeline
    assert retention_problems(templates) == []


def test_every_log_group_of_a_nova_forge_deployment_expires(nova_forge_synth: tuple[Deployment, Any]) -> None:
    assert retention_problems(_templates(nova_forge_synth[1])) == []


def test_cdk_handlers_get_a_group_with_the_deployment_retention_and_key() -> None:
    app = cdk.App()
    stack = cdk.Stack(app, "S")
    s3.Bucket(stack, "Bucket", auto_delete_objects=True, removal_policy=cdk.RemovalPolicy.DESTROY)
    assert retention_problems({"S": app.synth().get_stack_by_name("S").template}) != []  # CDK's handler: none

    app = cdk.App()
    stack = cdk.Stack(app, "S")
    key = kms.Key(stack, "Key")
    s3.Bucket(stack, "Bucket", auto_delete_objects=True, removal_policy=cdk.RemovalPolicy.DESTROY)
    assert give_every_function_a_log_group(stack, encryption_key=key, retention_days=30) == 1
    template = app.synth().get_stack_by_name("S").template
    assert retention_problems({"S": template}) == []
    (group,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::Logs::LogGroup"]
    assert group["Properties"]["RetentionInDays"] == 30
    assert "KmsKeyId" in group["Properties"]
    assert (
        group["Properties"]["LogGroupName"] == "/S/functions/Custom--S3AutoDeleteObjectsCustomResourceProvider/Handler"
    )
