"""Network stack: the VPC and security groups every other component runs in."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_kms as kms
from constructs import Construct

from mtrl.settings import DeploySettings
from stacks.constructs.network import Network


class NetworkStack(cdk.Stack):
    def __init__(
        self, scope: Construct, id_: str, *, settings: DeploySettings, encryption_key: kms.IKey, **kwargs: Any
    ) -> None:
        super().__init__(scope, id_, **kwargs)
        self.network = Network(
            self, "Network", settings=settings, prefix=settings.prefix, encryption_key=encryption_key
        )
        cdk.CfnOutput(self, "VpcId", value=self.network.vpc.vpc_id)
        cdk.CfnOutput(
            self,
            "PrivateSubnetIds",
            value=",".join(subnet.subnet_id for subnet in self.network.private_subnets.subnets or []),
        )
