"""Where a deployment keeps its data: the customer-managed key, the buckets and the run table."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mtrl.settings.data import DataSettings
from stacks.nag import acknowledge

# Key layout of the run table (single-table design): runs, slots and their events share it.
RUN_TABLE_PARTITION_KEY = "pk"
RUN_TABLE_SORT_KEY = "sk"
RUN_TABLE_LISTING_INDEX = "by_kind"  # list items of one kind (e.g. every run) newest first
RUN_TABLE_TTL_ATTRIBUTE = "expires_at"

# The S3 prefixes every other part of the system agrees on.
TRAINING_DATA_PREFIX = "training-data/"
RUNS_PREFIX = "runs/"


class DataStore(Construct):
    """Attributes: ``key``, ``data_bucket``, ``access_log_bucket``, ``run_table``."""

    def __init__(self, scope: Construct, id_: str, *, settings: DataSettings, prefix: str) -> None:
        super().__init__(scope, id_)
        stack = cdk.Stack.of(self)
        removal = cdk.RemovalPolicy.RETAIN if settings.retain_data else cdk.RemovalPolicy.DESTROY

        self.key = kms.Key(
            self,
            "DataKey",
            alias=f"alias/{prefix}/data",
            description=f"{prefix}: data, logs, topics and queues of the mtrl deployment",
            enable_key_rotation=True,
            removal_policy=removal,
        )
        self._grant_service_principals(stack)

        self.access_log_bucket = s3.Bucket(
            self,
            "AccessLogBucket",
            # S3 server access logging can deliver only to SSE-S3 buckets, not SSE-KMS ones.
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            versioned=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireAccessLogs",
                    expiration=cdk.Duration.days(settings.access_log_expiration_days),
                    noncurrent_version_expiration=cdk.Duration.days(1),
                )
            ],
            removal_policy=removal,
            auto_delete_objects=False,
        )
        acknowledge(
            self.access_log_bucket,
            "AwsSolutions-S1",
            "This bucket is the server-access-log target; logging its own access would recurse.",
        )

        lifecycle = [
            s3.LifecycleRule(
                id="ExpireReplacedDatasetVersions",
                noncurrent_version_expiration=cdk.Duration.days(settings.noncurrent_version_expiration_days),
            ),
            s3.LifecycleRule(id="AbortIncompleteUploads", abort_incomplete_multipart_upload_after=cdk.Duration.days(7)),
        ]
        if settings.run_artifact_expiration_days > 0:
            lifecycle.append(
                s3.LifecycleRule(
                    id="ExpireRunArtifacts",
                    prefix=RUNS_PREFIX,
                    expiration=cdk.Duration.days(settings.run_artifact_expiration_days),
                )
            )
        self.data_bucket = s3.Bucket(
            self,
            "DataBucket",
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.key,
            bucket_key_enabled=True,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            versioned=True,
            server_access_logs_bucket=self.access_log_bucket,
            server_access_logs_prefix="data-bucket/",
            lifecycle_rules=lifecycle,
            removal_policy=removal,
        )
        # Native EventBridge notifications (no custom-resource Lambda, unlike `event_bridge_enabled=True`).
        cfn_data_bucket = self.data_bucket.node.default_child
        assert isinstance(cfn_data_bucket, s3.CfnBucket)
        cfn_data_bucket.add_property_override(
            "NotificationConfiguration.EventBridgeConfiguration.EventBridgeEnabled", True
        )

        self.run_table = dynamodb.Table(
            self,
            "RunTable",
            partition_key=dynamodb.Attribute(name=RUN_TABLE_PARTITION_KEY, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=RUN_TABLE_SORT_KEY, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED,
            encryption_key=self.key,
            time_to_live_attribute=RUN_TABLE_TTL_ATTRIBUTE,
            removal_policy=removal,
        )
        self.run_table.add_global_secondary_index(
            index_name=RUN_TABLE_LISTING_INDEX,
            partition_key=dynamodb.Attribute(name="kind", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="created_at", type=dynamodb.AttributeType.STRING),
            projection_type=dynamodb.ProjectionType.ALL,
        )

    def _grant_service_principals(self, stack: cdk.Stack) -> None:
        """Key-policy grants for services that encrypt with the key on our behalf."""
        log_groups_here = f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:*"
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchLogsEncryptLogGroups",
                principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
                actions=[
                    "kms:Encrypt*",
                    "kms:Decrypt*",
                    "kms:ReEncrypt*",
                    "kms:GenerateDataKey*",
                    "kms:Describe*",
                ],
                resources=["*"],  # in a key policy "*" means this key
                conditions={"ArnLike": {"kms:EncryptionContext:aws:logs:arn": log_groups_here}},
            )
        )
        # HyperPod's instance volumes (root and /opt/sagemaker) are encrypted with this key (hyperpod_cluster.py). EBS
        # uses it on behalf of the principal that launches them, in this account only: the statement the AWS managed
        # aws/ebs key carries (kms:CallerAccount + kms:ViaService ec2.<region>), and grants only for AWS resources.
        ebs = {"kms:CallerAccount": stack.account, "kms:ViaService": f"ec2.{stack.region}.amazonaws.com"}
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="EbsVolumesOfThisAccount",
                principals=[iam.AnyPrincipal()],
                actions=["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"],
                resources=["*"],
                conditions={"StringEquals": ebs},
            )
        )
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="EbsVolumeGrantsOfThisAccount",
                principals=[iam.AnyPrincipal()],
                actions=["kms:CreateGrant"],
                resources=["*"],
                conditions={"StringEquals": ebs, "Bool": {"kms:GrantIsForAWSResource": "true"}},
            )
        )
        # CloudWatch alarms publish to the KMS-encrypted SNS topic.
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
                conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
            )
        )
        # EventBridge writes undeliverable events to the KMS-encrypted rule-target DLQs. The statement is the one the
        # Amazon SQS developer guide documents for AWS event sources ("Configure KMS permissions for AWS services":
        # the service principal, kms:GenerateDataKey and kms:Decrypt, no condition); the source-context keys are not
        # supported for EventBridge delivery to encrypted targets (Amazon SNS developer guide, "Key management"), and
        # with them the DLQ write fails and the event is lost unseen. Which rule may write which queue is held by
        # each queue's policy (aws:SourceArn = the rule), not by the key.
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="EventBridgeDeliver",
                principals=[iam.ServicePrincipal("events.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey"],
                resources=["*"],
            )
        )
