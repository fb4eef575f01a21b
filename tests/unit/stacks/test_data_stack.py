"""Data stack: key, buckets and run table, asserted property by property."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match, Template

from stacks.app_builder import Deployment
from stacks.constructs.data_store import RUN_TABLE_LISTING_INDEX, RUNS_PREFIX
from tests.conftest import make_app
from tests.run_table import LISTING_INDEX


@pytest.fixture(scope="module")
def pipeline_template(deployment: Deployment) -> Template:
    return Template.from_stack(deployment.pipeline)


def test_key_rotates_and_grants_the_services_that_encrypt_for_us(data_template: Template) -> None:
    data_template.resource_count_is("AWS::KMS::Key", 1)
    data_template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})
    data_template.has_resource_properties("AWS::KMS::Alias", {"AliasName": "alias/mtrl/data"})
    statements = data_template.find_resources("AWS::KMS::Key")
    (key,) = statements.values()
    by_sid = {s.get("Sid"): s for s in key["Properties"]["KeyPolicy"]["Statement"]}
    logs = by_sid["CloudWatchLogsEncryptLogGroups"]
    assert logs["Principal"] == {"Service": "logs.us-east-1.amazonaws.com"}
    assert "kms:EncryptionContext:aws:logs:arn" in logs["Condition"]["ArnLike"]
    alarms = by_sid["CloudWatchAlarmsPublish"]
    assert alarms["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert set(alarms["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    assert alarms["Condition"] == {"StringEquals": {"aws:SourceAccount": "123456789012"}}


def test_eventbridge_may_encrypt_into_the_dead_letter_queues_as_documented(data_template: Template) -> None:
    # Issue 20 item 3. Amazon SQS developer guide, "Key management" > "Configure KMS permissions for AWS services":
    # an AWS event source writing to an encrypted queue needs, in the key policy, its service principal with
    # kms:GenerateDataKey and kms:Decrypt, and the documented statement carries no condition. Amazon SNS developer
    # guide, "Key management": adding aws:SourceAccount / aws:SourceArn to the key policy "is not supported for
    # EventBridge-to-encrypted topics" (quoted in awslabs/landing-zone-accelerator-on-aws#407, where that condition
    # dropped every event). With such a condition an event EventBridge cannot deliver to the trigger or reaper is
    # not written to its encrypted DLQ either, and the DLQ alarm never fires.
    (key,) = data_template.find_resources("AWS::KMS::Key").values()
    by_sid = {s.get("Sid"): s for s in key["Properties"]["KeyPolicy"]["Statement"]}
    events = by_sid["EventBridgeDeliver"]
    assert events["Effect"] == "Allow"
    assert events["Principal"] == {"Service": "events.amazonaws.com"}
    assert sorted(events["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey"]
    assert "Condition" not in events
    # No other statement names EventBridge with a source-context condition either.
    for statement in key["Properties"]["KeyPolicy"]["Statement"]:
        if statement.get("Principal") == {"Service": "events.amazonaws.com"}:
            assert not any(
                k.lower().startswith("aws:source") for c in statement.get("Condition", {}).values() for k in c
            )


def test_each_dead_letter_queue_admits_only_its_own_rule(pipeline_template: Template) -> None:
    # EventBridge user guide, "Granting permissions to the dead-letter queue": the queue policy allows
    # events.amazonaws.com sqs:SendMessage with ArnEquals aws:SourceArn = the rule. That condition is where the
    # scoping lives now that the key statement has none.
    template = pipeline_template.to_json()
    resources = template["Resources"]
    rules = {lid: r["Properties"] for lid, r in resources.items() if r["Type"] == "AWS::Events::Rule"}
    dlqs = {
        target["DeadLetterConfig"]["Arn"]["Fn::GetAtt"][0]: lid
        for lid, rule in rules.items()
        for target in rule.get("Targets", [])
        if "DeadLetterConfig" in target
    }
    assert len(dlqs) == 2  # the upload trigger's and the reaper's delivery DLQs
    policies = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::SQS::QueuePolicy"]
    for queue, rule in dlqs.items():
        statements = [
            s
            for policy in policies
            if {"Ref": queue} in policy["Queues"]
            for s in policy["PolicyDocument"]["Statement"]
            if s.get("Principal") == {"Service": "events.amazonaws.com"}
        ]
        (send,) = statements
        assert send["Action"] == "sqs:SendMessage"
        assert send["Condition"] == {"ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": [rule, "Arn"]}}}


def test_data_bucket_is_versioned_encrypted_private_and_emits_events(data_template: Template) -> None:
    data_template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "VersioningConfiguration": {"Status": "Enabled"},
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [
                    {
                        "BucketKeyEnabled": True,
                        "ServerSideEncryptionByDefault": {
                            "SSEAlgorithm": "aws:kms",
                            "KMSMasterKeyID": Match.any_value(),
                        },
                    }
                ]
            },
            "PublicAccessBlockConfiguration": {
                "BlockPublicAcls": True,
                "BlockPublicPolicy": True,
                "IgnorePublicAcls": True,
                "RestrictPublicBuckets": True,
            },
            "NotificationConfiguration": {"EventBridgeConfiguration": {"EventBridgeEnabled": True}},
            "LoggingConfiguration": {
                "DestinationBucketName": Match.any_value(),
                "LogFilePrefix": "data-bucket/",
            },
        },
    )


def test_data_bucket_lifecycle_expires_old_versions_and_run_artifacts(data_template: Template) -> None:
    data_template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "LifecycleConfiguration": {
                "Rules": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Id": "ExpireReplacedDatasetVersions",
                                "NoncurrentVersionExpiration": {"NoncurrentDays": 90},
                            }
                        ),
                        Match.object_like({"Id": "ExpireRunArtifacts", "Prefix": RUNS_PREFIX, "ExpirationInDays": 365}),
                    ]
                )
            }
        },
    )


def test_every_bucket_denies_plain_http(data_template: Template) -> None:
    data_template.resource_count_is("AWS::S3::BucketPolicy", 2)
    policies = data_template.find_resources("AWS::S3::BucketPolicy")
    for policy in policies.values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        assert any(
            s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in statements
        )


def test_access_log_bucket_uses_s3_managed_encryption(data_template: Template) -> None:
    # Server access logging cannot deliver into an SSE-KMS bucket.
    data_template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [{"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
            },
            "LifecycleConfiguration": {
                "Rules": [Match.object_like({"Id": "ExpireAccessLogs", "ExpirationInDays": 365})]
            },
        },
    )


def test_run_table_is_on_demand_recoverable_and_encrypted_with_our_key(data_template: Template) -> None:
    data_template.has_resource_properties(
        "AWS::DynamoDB::Table",
        {
            "BillingMode": "PAY_PER_REQUEST",
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
            "SSESpecification": {"SSEEnabled": True, "SSEType": "KMS", "KMSMasterKeyId": Match.any_value()},
            "TimeToLiveSpecification": {"AttributeName": "expires_at", "Enabled": True},
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            "GlobalSecondaryIndexes": [Match.object_like({"IndexName": RUN_TABLE_LISTING_INDEX})],
        },
    )


def test_the_tests_run_table_lists_by_the_deployed_index() -> None:
    assert LISTING_INDEX == RUN_TABLE_LISTING_INDEX  # tests/run_table.py names it without importing CDK


def test_state_is_retained_on_stack_deletion_by_default(data_template: Template) -> None:
    for resource_type in ("AWS::S3::Bucket", "AWS::DynamoDB::Table", "AWS::KMS::Key"):
        for resource in data_template.find_resources(resource_type).values():
            assert resource["DeletionPolicy"] == "Retain", resource_type


def test_retain_data_off_deletes_state_and_run_expiry_zero_keeps_runs() -> None:
    _, deployment = make_app({"retain_data": "false", "run_artifact_expiration_days": "0"})
    template = Template.from_stack(deployment.data)
    for resource_type in ("AWS::S3::Bucket", "AWS::DynamoDB::Table", "AWS::KMS::Key"):
        for resource in template.find_resources(resource_type).values():
            assert resource["DeletionPolicy"] == "Delete", resource_type
    buckets = template.find_resources("AWS::S3::Bucket")
    rule_ids = {
        rule["Id"]
        for bucket in buckets.values()
        for rule in bucket["Properties"].get("LifecycleConfiguration", {}).get("Rules", [])
    }
    assert "ExpireRunArtifacts" not in rule_ids
    assert "ExpireReplacedDatasetVersions" in rule_ids
