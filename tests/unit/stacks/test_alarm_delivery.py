"""Every alarm action and every EventBridge → SNS target can actually deliver (issue 11, defect 5).

Sources:
- Amazon SNS Developer Guide, "Amazon SNS access control case examples" and "Preventing cross-service confused
  deputy": a topic policy replaces the default one, so a service that publishes (``cloudwatch.amazonaws.com`` for
  alarms, ``events.amazonaws.com`` for rules) must be allowed ``sns:Publish`` in it, scoped with ``aws:SourceAccount``
  (and ``aws:SourceArn``).
- Amazon SNS Developer Guide, "Managing Amazon SNS encryption keys" → "Enable compatibility between event sources
  from AWS services and encrypted topics": for a topic encrypted with a customer managed key, the key policy must
  allow the publishing service ``kms:Decrypt`` and ``kms:GenerateDataKey*``.

The test walks the synthesized templates of the whole deployment (every alarm, every rule), not a hand-made list.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from typing import Any

import pytest
from aws_cdk.assertions import Template

from stacks.app_builder import Deployment


@pytest.fixture(scope="module")
def templates(deployment: Deployment) -> dict[str, dict[str, Any]]:
    stacks = [deployment.data, deployment.network, deployment.cluster, deployment.reward_workers]
    stacks += [deployment.backends, deployment.pipeline]
    return {stack.stack_name: Template.from_stack(stack).to_json() for stack in stacks if stack is not None}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _services(statement: dict[str, Any]) -> set[str]:
    principal = statement.get("Principal")
    if not isinstance(principal, dict):
        return set()
    return set(_as_list(principal.get("Service", [])))


def _resolve(value: Any, account: str, region: str) -> str:
    """An ARN pattern from a template value (Fn::Join of literals and pseudo parameters)."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(_resolve(part, account, region) for part in parts)
    pseudo = {"AWS::AccountId": account, "AWS::Region": region, "AWS::Partition": "aws"}
    if value.get("Ref") in pseudo:
        return pseudo[value["Ref"]]
    raise AssertionError(f"cannot resolve {value!r}")


def _topic_policy_allows(
    template: dict[str, Any], topic_id: str, service: str, source_arn: str, *, account: str, region: str
) -> bool:
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::SNS::TopicPolicy" or {"Ref": topic_id} not in resource["Properties"]["Topics"]:
            continue
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Effect"] != "Allow" or service not in _services(statement):
                continue
            if "sns:Publish" not in _as_list(statement["Action"]):
                continue
            conditions = statement.get("Condition", {})
            source_account = conditions.get("StringEquals", {}).get("aws:SourceAccount")
            if source_account is None:
                continue  # without it any account's alarms could publish here (confused deputy)
            assert _resolve(source_account, account, region) == account
            pattern = conditions.get("ArnLike", {}).get("aws:SourceArn")
            if pattern is None or fnmatch.fnmatchcase(source_arn, _resolve(pattern, account, region)):
                return True
    return False


def _key_policy_allows(templates: dict[str, dict[str, Any]], key_reference: Any, service: str) -> bool:
    """Follow the topic's KmsMasterKeyId (an import of another stack's export) to the key and read its policy."""
    if "Fn::ImportValue" in key_reference:
        ((owner, exported),) = [
            (template, output["Value"])
            for template in templates.values()
            for output in template.get("Outputs", {}).values()
            if output.get("Export", {}).get("Name") == key_reference["Fn::ImportValue"]
        ]
        template, key_reference = owner, exported
    else:
        raise AssertionError(f"unexpected key reference {key_reference!r}")
    key_id = key_reference["Fn::GetAtt"][0]
    statements = template["Resources"][key_id]["Properties"]["KeyPolicy"]["Statement"]
    needed = {"kms:Decrypt", "kms:GenerateDataKey*"}
    for statement in statements:
        if statement["Effect"] == "Allow" and service in _services(statement):
            needed -= set(_as_list(statement["Action"]))
    return not needed


def _publishers(templates: dict[str, dict[str, Any]]) -> Iterator[tuple[str, str, str, str, str]]:
    """(stack, topic logical id, publishing service, source ARN, what) for every alarm action and SNS rule target."""
    account, region = "123456789012", "us-east-1"
    for stack, template in templates.items():
        resources = template["Resources"]
        for logical_id, resource in resources.items():
            properties = resource.get("Properties", {})
            if resource["Type"] == "AWS::CloudWatch::Alarm":
                source = f"arn:aws:cloudwatch:{region}:{account}:alarm:{properties['AlarmName']}"
                for key in ("AlarmActions", "OKActions", "InsufficientDataActions"):
                    for action in properties.get(key, []):
                        assert isinstance(action, dict), f"{logical_id}: {action!r}"
                        assert "Ref" in action, f"{logical_id}: {action!r}"
                        assert resources[action["Ref"]]["Type"] == "AWS::SNS::Topic", f"{logical_id}: {action!r}"
                        yield stack, action["Ref"], "cloudwatch.amazonaws.com", source, f"alarm {logical_id}"
            if resource["Type"] == "AWS::Events::Rule":
                source = f"arn:aws:events:{region}:{account}:rule/{properties.get('Name', logical_id)}"
                for target in properties.get("Targets", []):
                    arn = target["Arn"]
                    if isinstance(arn, dict) and "Ref" in arn and resources[arn["Ref"]]["Type"] == "AWS::SNS::Topic":
                        yield stack, arn["Ref"], "events.amazonaws.com", source, f"rule {logical_id}"


def test_every_alarm_action_and_rule_target_topic_admits_its_publisher(templates: dict[str, dict[str, Any]]) -> None:
    publishers = list(_publishers(templates))
    assert any(what.startswith("alarm") for *_, what in publishers)  # the walk found the pipeline's alarms
    for stack, topic_id, service, source, what in publishers:
        template = templates[stack]
        assert _topic_policy_allows(template, topic_id, service, source, account="123456789012", region="us-east-1"), (
            f"{stack}: {what} publishes to {topic_id}, whose topic policy does not allow {service} (with "
            "aws:SourceAccount) to sns:Publish"
        )
        key = template["Resources"][topic_id]["Properties"].get("KmsMasterKeyId")
        if key is not None:
            assert _key_policy_allows(templates, key, service), (
                f"{stack}: {what} publishes to the encrypted {topic_id}, whose key does not let {service} "
                "kms:Decrypt and kms:GenerateDataKey*"
            )


def test_the_topic_admits_only_this_deployments_alarms(templates: dict[str, dict[str, Any]]) -> None:
    stack, topic_id, service, _source, _what = next(_publishers(templates))
    template = templates[stack]
    foreign = "arn:aws:cloudwatch:us-east-1:123456789012:alarm:someone-else-alarm"
    assert not _topic_policy_allows(template, topic_id, service, foreign, account="123456789012", region="us-east-1")
