"""The EKS cluster HyperPod orchestrates with: API (access-entry) auth, full control-plane logging,
envelope-encrypted secrets, managed add-ons, and access entries instead of aws-auth system:masters."""

from __future__ import annotations

from typing import cast

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from mtrl.settings import eks_support
from mtrl.settings.cluster import ClusterSettings
from stacks.nag import acknowledge

# Managed add-ons HyperPod nodes need: pod networking, service routing, DNS, and Pod Identity for pods
# (pods on HyperPod nodes cannot reach instance metadata, so Pod Identity is how they get AWS credentials).
MANAGED_ADDONS: tuple[str, ...] = ("vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent")

# The control-plane log types by their CloudFormation names (the eks_control_plane_logs setting's values).
LOG_TYPES: dict[str, eks.ClusterLoggingTypes] = {
    "api": eks.ClusterLoggingTypes.API,
    "audit": eks.ClusterLoggingTypes.AUDIT,
    "authenticator": eks.ClusterLoggingTypes.AUTHENTICATOR,
    "controllerManager": eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
    "scheduler": eks.ClusterLoggingTypes.SCHEDULER,
}

CLUSTER_ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"
VIEW_POLICY = "AmazonEKSViewPolicy"
EDIT_POLICY = "AmazonEKSEditPolicy"

# Namespaces the Nova Forge runner role may create and change workloads in (its access entry: backends stack).
JOB_NAMESPACES: tuple[str, ...] = ("kubeflow", "mtrl-runs")


class EksCluster(Construct):
    """Attributes: ``cluster``, ``cluster_name``, ``cluster_arn``, ``addons`` (name → CfnAddon)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        settings: ClusterSettings,
        prefix: str,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        security_group: ec2.ISecurityGroup,
        secrets_key: kms.IKey,
    ) -> None:
        super().__init__(scope, id_)
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=f"{prefix}-eks",
            version=eks.KubernetesVersion.of(settings.kubernetes_version),
            vpc=vpc,
            vpc_subnets=[subnets],
            # HyperPod instance groups are the compute; EKS gets no node group and no Auto Mode.
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            # The managed add-ons below are the only copies (no unmanaged bootstrap versions to take over).
            bootstrap_self_managed_addons=False,
            # Nobody is admin by virtue of having run the deployment; every principal has an access entry.
            bootstrap_cluster_creator_admin_permissions=False,
            endpoint_access=endpoint_access(settings),
            cluster_logging=[LOG_TYPES[name] for name in settings.eks_control_plane_logs] or None,
            secrets_encryption_key=secrets_key,
            security_group=security_group,
        )
        # The L2 construct has no upgrade-policy property; CloudFormation's default is EXTENDED (billed extended
        # support after the end of standard support), so the policy is always stated (docs/cluster.md).
        cfn_cluster = self.cluster.node.default_child
        assert isinstance(cfn_cluster, eks.CfnCluster)
        cfn_cluster.upgrade_policy = eks.CfnCluster.UpgradePolicyProperty(support_type=settings.eks_support_type)
        endpoint_warning = settings.public_endpoint_warning()
        if endpoint_warning:
            cdk.Annotations.of(self).add_warning_v2("mtrl:eks-public-endpoint-open", endpoint_warning)
        warning = eks_support.kubernetes_support_warning(settings, today=eks_support.utc_today())
        if warning:
            cdk.Annotations.of(self).add_warning_v2("mtrl:kubernetes-standard-support", warning)
        if len(settings.eks_control_plane_logs) < len(LOG_TYPES):
            acknowledge(
                cfn_cluster,
                "AwsSolutions-EKS2",
                "The operator chose fewer control-plane log types (eks_control_plane_logs, a documented cost lever); "
                "all five are sent by default",
            )
        acknowledge(
            self.cluster.role,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKSClusterPolicy]",
            "The EKS control plane's service role needs the AWS managed cluster policy (EKS documentation).",
        )
        # jsii's generated protocol omits a member the class has; the object is a full ICluster.
        self._icluster = cast(eks.ICluster, self.cluster)
        self.cluster_name = self.cluster.cluster_name
        self.cluster_arn = self.cluster.cluster_arn

        self.addons: dict[str, eks.CfnAddon] = {}
        for name in MANAGED_ADDONS:
            self.addons[name] = eks.CfnAddon(
                self,
                f"Addon-{name}",
                addon_name=name,
                cluster_name=self.cluster.cluster_name,
                resolve_conflicts="OVERWRITE",
                preserve_on_delete=False,
            )

        for index, arn in enumerate(settings.eks_admin_role_arns):
            self.grant_cluster_admin(f"OperatorAdmin{index}", arn)
        for index, arn in enumerate(settings.eks_viewer_role_arns):
            self.cluster.grant_access(f"OperatorViewer{index}", arn, [_cluster_policy(VIEW_POLICY)])

    def grant_cluster_admin(self, id_: str, principal_arn: str) -> eks.AccessEntry:
        return self._entry(id_, principal_arn, [_cluster_policy(CLUSTER_ADMIN_POLICY)])

    def grant_hyperpod_nodes(self, id_: str, role: iam.IRole) -> eks.AccessEntry:
        """The HYPERPOD_LINUX entry lets instances with this role join as nodes (no access policies allowed)."""
        return eks.AccessEntry(
            self,
            id_,
            cluster=self._icluster,
            principal=role.role_arn,
            access_policies=[],
            access_entry_type=eks.AccessEntryType.HYPERPOD_LINUX,
        )

    def _entry(self, id_: str, principal_arn: str, policies: list[eks.IAccessPolicy]) -> eks.AccessEntry:
        return eks.AccessEntry(self, id_, cluster=self._icluster, principal=principal_arn, access_policies=policies)


def endpoint_access(settings: ClusterSettings) -> eks.EndpointAccess:
    """The endpoint access of eks_endpoint_access: private only (the default), or with a public endpoint that serves
    eks_public_access_cidrs (Amazon EKS User Guide, "Cluster API server endpoint")."""
    if settings.eks_endpoint_access == "private":
        return eks.EndpointAccess.PRIVATE
    public = (
        eks.EndpointAccess.PUBLIC if settings.eks_endpoint_access == "public" else eks.EndpointAccess.PUBLIC_AND_PRIVATE
    )
    return public.only_from(*settings.eks_public_access_cidrs)


def _cluster_policy(name: str) -> eks.IAccessPolicy:
    return eks.AccessPolicy.from_access_policy_name(name, access_scope_type=eks.AccessScopeType.CLUSTER)
