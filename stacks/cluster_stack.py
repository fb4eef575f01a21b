"""Cluster stack: EKS + SageMaker HyperPod with the GPU group idling at 0 (or an existing cluster).

No role here is for the pipeline: the hyperpod backend scales and watches the cluster with its own role
(stacks/backends/hyperpod/permissions.py), and the Nova Forge runner submits jobs with its own access entry.
"""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mtrl.backends.verl.config import verl_namespace
from mtrl.settings import DeploySettings
from stacks.constructs.eks_cluster import JOB_NAMESPACES, EksCluster
from stacks.constructs.encrypted_log_group import EncryptedLogGroup
from stacks.constructs.hyperpod_cluster import HyperPodCluster
from stacks.constructs.hyperpod_helm import RELEASE_NAME, RELEASE_NAMESPACE, HyperPodHelmRelease
from stacks.constructs.kuberay import KUBERAY_VERSION, OPERATOR_NAMESPACE, OPERATOR_RELEASE, KubeRayOperator
from stacks.constructs.kubernetes_access import KubernetesApiAccess


class ClusterStack(cdk.Stack):
    """Attributes for other stacks: ``eks_cluster_name``, ``eks_cluster_arn``, ``hyperpod_cluster_name``,
    ``hyperpod_cluster_arn`` (None for an existing cluster), ``execution_role`` (None for an existing cluster),
    ``training_instance_group`` (settings), and the constructs ``eks``, ``helm``, ``kuberay``, ``hyperpod`` (None in
    existing-cluster mode)."""

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
        data_bucket: s3.IBucket,
        run_table: dynamodb.ITable,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id_, **kwargs)
        self.training_instance_group = settings.training_instance_group
        self.eks: EksCluster | None = None
        self.helm: HyperPodHelmRelease | None = None
        self.kuberay: KubeRayOperator | None = None
        self.hyperpod: HyperPodCluster | None = None
        self.execution_role: iam.IRole | None = None

        if settings.uses_existing_cluster:
            assert settings.existing_eks_cluster_name is not None
            assert settings.existing_hyperpod_cluster_name is not None
            self.eks_cluster_name: str = settings.existing_eks_cluster_name
            self.eks_cluster_arn: str = self.format_arn(
                service="eks", resource="cluster", resource_name=self.eks_cluster_name
            )
            self.hyperpod_cluster_name: str = settings.existing_hyperpod_cluster_name
            self.hyperpod_cluster_arn: str | None = None
            # Nothing to create for an existing cluster, but CloudFormation refuses a stack without resources: a
            # wait-condition handle is free and inert, and keeps the outputs deployable.
            cdk.CfnWaitConditionHandle(self, "ExistingClusterPlaceholder")
        else:
            self._create_clusters(
                settings=settings,
                vpc=vpc,
                security_group=security_group,
                encryption_key=encryption_key,
                access_log_bucket=access_log_bucket,
                data_bucket=data_bucket,
                run_table=run_table,
            )

        self._outputs(settings)

    def _create_clusters(
        self,
        *,
        settings: DeploySettings,
        vpc: ec2.IVpc,
        security_group: ec2.ISecurityGroup,
        encryption_key: kms.IKey,
        access_log_bucket: s3.IBucket,
        data_bucket: s3.IBucket,
        run_table: dynamodb.ITable,
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
            run_table=run_table,
            # In the private subnets, admitted by the cluster's group: it reaches the private endpoint.
            kubernetes_access=KubernetesApiAccess(
                vpc=vpc, subnets=private, control_plane_security_group=security_group
            ),
        )
        # The verl backend's operator and the namespace its RayJobs run in, by the same installer.
        self.kuberay = KubeRayOperator(self, "KubeRay", installer=self.helm, namespace=verl_namespace(settings))
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
            data_bucket=data_bucket,
            data_key=encryption_key,
        )
        self.execution_role = self.hyperpod.execution_role
        # HyperPod needs the chart (health agent, device plugins) in the cluster before it is created.
        self.hyperpod.depend_on(self.helm.release)
        # An update of the cluster resets every group to its template count (the idle count), which would stop a
        # live run: the release (updated first) refuses while a run holds the cluster (docs/operations.md).
        self.helm.guard(self.hyperpod.rendered_properties())
        # HyperPod's CreateCluster creates the HYPERPOD_LINUX entry of its execution role itself; declaring it
        # here too is opt-in (docs/cluster.md, "Who can use the cluster").
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
            "TrainingInstanceGroup": (settings.run_instance_group.name, "Instance group the pipeline scales per run"),
            "InstanceGroups": (json.dumps(groups), "Instance groups with their idle and run counts"),
            "JobNamespaces": (",".join(JOB_NAMESPACES), "Namespaces the Nova Forge runner may write to"),
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
                "KubeRayRelease": (
                    f"{OPERATOR_NAMESPACE}/{OPERATOR_RELEASE} {KUBERAY_VERSION}",
                    "KubeRay operator Helm release (watches only the verl namespace)",
                ),
                "VerlNamespace": (verl_namespace(settings), "Namespace of the verl backend's RayJobs"),
            }
        for name, (value, description) in outputs.items():
            cdk.CfnOutput(self, name, value=value, description=description)
