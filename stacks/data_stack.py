"""Data stack: the key, the data and access-log buckets, and the run table (long-lived state)."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import Construct

from mtrl.settings import DeploySettings
from stacks.constructs.data_store import DataStore


class DataStack(cdk.Stack):
    def __init__(self, scope: Construct, id_: str, *, settings: DeploySettings, **kwargs: Any) -> None:
        super().__init__(scope, id_, **kwargs)
        self.store = DataStore(self, "DataStore", settings=settings, prefix=settings.prefix)
        cdk.CfnOutput(self, "DataBucketName", value=self.store.data_bucket.bucket_name)
        cdk.CfnOutput(self, "RunTableName", value=self.store.run_table.table_name)
        cdk.CfnOutput(self, "DataKeyArn", value=self.store.key.key_arn)
