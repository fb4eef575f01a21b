"""A CloudWatch log group encrypted with the deployment's key, with a bounded retention."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct


class EncryptedLogGroup(Construct):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        log_group_name: str,
        encryption_key: kms.IKey,
        retention_days: int,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.DESTROY,
    ) -> None:
        super().__init__(scope, id_)
        self.log_group = logs.LogGroup(
            self,
            "LogGroup",
            log_group_name=log_group_name,
            encryption_key=encryption_key,
            removal_policy=removal_policy,
        )
        # RetentionDays is a name-valued enum; the settings hold days, validated against the allowed values.
        cfn_log_group = self.log_group.node.default_child
        assert isinstance(cfn_log_group, logs.CfnLogGroup)
        cfn_log_group.retention_in_days = retention_days
