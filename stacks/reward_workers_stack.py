"""Reward-worker stack: the ECS cluster, task definition and idle service that score episodes."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mtrl.settings import DeploySettings
from stacks.constructs.reward_workers import RewardWorkers


class RewardWorkersStack(cdk.Stack):
    """Attribute ``workers`` (RewardWorkers): ``cluster``, ``service``, ``task_definition``, ``task_role``,
    ``container``, ``log_group``, ``max_tasks``, ``queue_name_prefix``, ``environment_prefix``."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        settings: DeploySettings,
        vpc: ec2.IVpc,
        security_group: ec2.ISecurityGroup,
        data_bucket: s3.IBucket,
        encryption_key: kms.IKey,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id_, **kwargs)
        self.workers = RewardWorkers(
            self,
            "RewardWorkers",
            settings=settings,
            prefix=settings.prefix,
            vpc=vpc,
            security_group=security_group,
            data_bucket=data_bucket,
            encryption_key=encryption_key,
            log_retention_days=settings.log_retention_days,
        )
        w = self.workers
        outputs = {
            "ClusterName": (w.cluster.cluster_name, "ECS cluster of the reward workers"),
            "ClusterArn": (w.cluster.cluster_arn, "ECS cluster ARN"),
            "ServiceName": (w.service.service_name, "Reward-worker service (desired count 0 between runs)"),
            "ServiceArn": (w.service.service_arn, "Reward-worker service ARN"),
            "ContainerName": (w.container.container_name, "Container to override per run (environment, queues)"),
            "TaskDefinitionArn": (w.task_definition.task_definition_arn, "Reward-worker task definition"),
            "TaskRoleArn": (w.task_role.role_arn, "Role the environment code runs with"),
            "LogGroupName": (w.log_group.log_group_name, "Reward-worker logs"),
            "MaxTasks": (str(w.max_tasks), "Most tasks one run may scale the service to"),
            "QueueNamePrefix": (w.queue_name_prefix, "A run's queues must be named with this prefix"),
        }
        for name, (value, description) in outputs.items():
            cdk.CfnOutput(self, name, value=value, description=description)
