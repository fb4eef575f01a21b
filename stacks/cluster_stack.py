"""Cluster stack: EKS + SageMaker HyperPod with the GPU group idling at 0 (or an existing cluster)."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mtrl.settings import DeploySettings
from stacks.constructs.eks_cluster import JOB_NAMESPACES, EksCluster
from stacks.constructs.encrypted_log_group import EncryptedLogGroup
from stacks.constructs.hyperpod_cluster import HyperPodCluster
from stacks.constructs.hyperpod_helm import RELEASE_NAME, RELEASE_NAMESPACE, HyperPodHelmRelease
from stacks.nag import acknowledge, nag_resource

# SageMaker cluster actions the pipeline uses to scale the training group and check node readiness.
HYPERPOD_RUN_ACTIONS = [
    "sagemaker:DescribeCluster",
    "sagemaker:UpdateCluster",
    "sagemaker:ListClusterNodes",
    "sagemaker:DescribeClusterNode",
]


class ClusterStack(cdk.Stack):
    """Attributes for other stacks: ``eks_cluster_name``, ``eks_cluster_arn``, ``hyperpod_cluster_name``,
    ``hyperpod_cluster_arn`` (None for an existing cluster), ``job_submission_role``, ``execution_role``
    (None for an existing cluster), ``training_instance_group`` (settings), and the constructs ``eks``,
    ``helm``, ``hyperpod`` (None in existing-cluster mode)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        settings: DeploySettings,
        vpc: ec2.IVpc,
        security_group: ec2.ISecurityGroup,
        encryption_key: kms.IKey,
        access_log_bucket: s3.IBucket,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id_, **kwargs)
        self.training_instance_group = settings.training_instance_group
        self.eks: EksCluster | None = None
        self.helm: HyperPodHelmRelease | None = None
        self.hyperpod: HyperPodCluster | None = None
        self.execution_role: iam.IRole | None = None

        # Assumed by the pipeline's Lambdas that scale the training group and submit jobs.
        self.job_submission_role = iam.Role(
            self,
            "JobSubmissionRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="mtrl pipeline: scale the HyperPod training group and submit jobs to the EKS cluster",
        )

        if settings.uses_existing_cluster:
            assert settings.existing_eks_cluster_name is not None
            assert settings.existing_hyperpod_cluster_name is not None
            self.eks_cluster_name: str = settings.existing_eks_cluster_name
            self.eks_cluster_arn: str = self.format_arn(
                service="eks", resource="cluster", resource_name=self.eks_cluster_name
            )
            self.hyperpod_cluster_name: str = settings.existing_hyperpod_cluster_name
            self.hyperpod_cluster_arn: str | None = None
            # A HyperPod ARN ends in a generated id, not the name: only the account's clusters can be named.
            hyperpod_resource = self.format_arn(service="sagemaker", resource="cluster", resource_name="*")
        else:
            self._create_clusters(settings, vpc, security_group, encryption_key, access_log_bucket)
            assert self.hyperpod is not None
            hyperpod_resource = self.hyperpod.cluster_arn

        policy = iam.Policy(
            self,
            "JobSubmissionPolicy",
            statements=[
                iam.PolicyStatement(
                    sid="ScaleAndWatchHyperPod", actions=HYPERPOD_RUN_ACTIONS, resources=[hyperpod_resource]
                ),
                iam.PolicyStatement(sid="ReachEks", actions=["eks:DescribeCluster"], resources=[self.eks_cluster_arn]),
            ],
        )
        if self.execution_role is not None:
            # UpdateCluster re-states each group's execution role, which is a PassRole to SageMaker.
            policy.add_statements(
                iam.PolicyStatement(
                    sid="PassNodeRoleToSageMaker",
                    actions=["iam:PassRole"],
                    resources=[self.execution_role.role_arn],
                    conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
                )
            )
        else:
            acknowledge(
                policy,
                f"AwsSolutions-IAM5[Resource::{nag_resource(self, hyperpod_resource)}]",
                "An existing HyperPod cluster's ARN ends in a service-generated id that the configuration does "
                "not know; the actions are limited to describing and scaling clusters.",
            )
        self.job_submission_role.attach_inline_policy(policy)
        if self.eks is not None:
            self.eks.grant_job_submission("JobSubmissionAccess", self.job_submission_role)

        self._outputs(settings)

    def _create_clusters(
        self,
        settings: DeploySettings,
        vpc: ec2.IVpc,
        security_group: ec2.ISecurityGroup,
        encryption_key: kms.IKey,
        access_log_bucket: s3.IBucket,
    ) -> None:
        prefix = settings.prefix
        private = ec2.SubnetSelection(subnets=vpc.private_subnets)
        # Pre-create the control-plane log group EKS writes to, so it is encrypted, bounded and removed
        # with the stack (a service-created one would keep logs forever and outlive the stack).
        control_plane_logs = EncryptedLogGroup(
            self,
            "EksControlPlaneLogs",
            log_group_name=f"/aws/eks/{prefix}-eks/cluster",
            encryption_key=encryption_key,
            retention_days=settings.log_retention_days,
        )
        self.eks = EksCluster(
            self,
            "Eks",
            settings=settings,
            prefix=prefix,
            vpc=vpc,
            subnets=private,
            security_group=security_group,
            secrets_key=encryption_key,
        )
        self.eks.cluster.node.add_dependency(control_plane_logs)
        self.eks_cluster_name = self.eks.cluster_name
        self.eks_cluster_arn = self.eks.cluster_arn

        self.helm = HyperPodHelmRelease(
            self,
            "HyperPodDependencies",
            settings=settings,
            eks_cluster=self.eks,
            encryption_key=encryption_key,
            log_retention_days=settings.log_retention_days,
        )
        self.hyperpod = HyperPodCluster(
            self,
            "HyperPod",
            settings=settings,
            prefix=prefix,
            vpc=vpc,
            subnets=list(vpc.private_subnets),
            security_group=security_group,
            eks_cluster_arn=self.eks.cluster_arn,
            access_log_bucket=access_log_bucket,
        )
        self.execution_role = self.hyperpod.execution_role
        # HyperPod needs the chart (health agent, device plugins) in the cluster before it is created.
        self.hyperpod.depend_on(self.helm.release)
        if settings.hyperpod_node_access_entry:
            self.hyperpod.depend_on(self.eks.grant_hyperpod_nodes("HyperPodNodeAccess", self.hyperpod.execution_role))
        self.hyperpod_cluster_name = self.hyperpod.cluster_name
        self.hyperpod_cluster_arn = self.hyperpod.cluster_arn

    def _outputs(self, settings: DeploySettings) -> None:
        groups = [
            {
                "name": g.name,
                "instance_type": g.instance_type,
                "purpose": g.purpose,
                "idle_count": g.idle_count,
                "run_count": g.run_count,
            }
            for g in settings.hyperpod_instance_groups
        ]
        outputs: dict[str, tuple[str, str]] = {
            "EksClusterName": (self.eks_cluster_name, "EKS cluster HyperPod is orchestrated by"),
            "EksClusterArn": (self.eks_cluster_arn, "EKS cluster ARN"),
            "HyperPodClusterName": (self.hyperpod_cluster_name, "HyperPod cluster the pipeline scales and submits to"),
            "JobSubmissionRoleArn": (self.job_submission_role.role_arn, "Role the pipeline uses for the clusters"),
            "TrainingInstanceGroup": (settings.run_instance_group.name, "Instance group the pipeline scales per run"),
            "InstanceGroups": (json.dumps(groups), "Instance groups with their idle and run counts"),
            "JobNamespaces": (",".join(JOB_NAMESPACES), "Namespaces the job-submission role may write to"),
            "KubeconfigCommand": (
                f"aws eks update-kubeconfig --name {self.eks_cluster_name} --region {self.region}",
                "Operators with an access entry: point kubectl at the cluster",
            ),
        }
        if self.hyperpod is not None and self.helm is not None:
            outputs |= {
                "HyperPodClusterArn": (self.hyperpod.cluster_arn, "HyperPod cluster ARN"),
                "HyperPodExecutionRoleArn": (self.hyperpod.execution_role.role_arn, "Node execution role"),
                "LifecycleScriptsS3Uri": (self.hyperpod.lifecycle_s3_uri, "Versioned lifecycle script location"),
                "HelmRelease": (f"{RELEASE_NAMESPACE}/{RELEASE_NAME}", "HyperPod dependencies Helm release"),
            }
        for name, (value, description) in outputs.items():
            cdk.CfnOutput(self, name, value=value, description=description)
