"""Deploy-time installer of the HyperPod dependencies Helm chart (must exist before the HyperPod cluster), and of the
other pinned releases the cluster needs (``add_release``: the KubeRay operator, stacks/constructs/kuberay.py).

A Lambda-backed custom resource runs ``helm upgrade --install`` of a pinned commit of the chart (see
``lambda/hyperpod_helm/``: its handler and ``helm_release`` package), so re-running it, or retrying after a partial
install, converges. The function runs in the VPC's private subnets (stacks/constructs/kubernetes_access.py) and
reaches the cluster's private endpoint with its own access entry: the cluster needs no public endpoint for it.

Hosts the function reaches at deploy time (documented in docs/cluster.md): codeload.github.com (the pinned
charts), the http(s) repositories of the installed remote sub-charts only (REMOTE_CHART_REPOSITORIES), the EKS API
and the cluster endpoint, DynamoDB (the run guard), and CloudFormation's response URL: all HTTPS, through the NAT
gateway (S3, where the response URL points, through the VPC's S3 gateway endpoint).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk.lambda_layer_kubectl_v34 import KubectlV34Layer
from constructs import Construct

from mtrl.settings.cluster import HELM_COMPONENT_CHARTS, HELM_COMPONENT_VALUE_KEYS, ClusterSettings
from stacks.constructs.eks_cluster import EksCluster
from stacks.constructs.encrypted_log_group import EncryptedLogGroup
from stacks.constructs.kubernetes_access import KubernetesApiAccess, KubernetesClientPlacement
from stacks.constructs.python_function import function_code

HANDLER_DIR = Path(__file__).resolve().parents[2] / "lambda" / "hyperpod_helm"
CHART_REPOSITORY = "aws/sagemaker-hyperpod-cli"
RELEASE_NAME = "hyperpod-dependencies"
RELEASE_NAMESPACE = "kube-system"
# The kubectl in the layer (aws-cdk.lambda-layer-kubectl-v34); Kubernetes' version skew policy lets kubectl talk
# to an API server one minor version older or newer.
KUBECTL_LAYER_VERSION = "1.34"
# Where the pinned chart's remote sub-charts come from (its Chart.yaml at HELM_CHART_TAG), pinned here: the installer
# refuses a Chart.yaml that names another repository for one of them, and reaches only those of the installed
# components.
REMOTE_CHART_REPOSITORIES: dict[str, str] = {
    "nvidia-device-plugin": "https://nvidia.github.io/k8s-device-plugin",
    "aws-efa-k8s-device-plugin": "https://aws.github.io/eks-charts",
    "cert-manager": "oci://quay.io/jetstack/charts",
}


def check_kubectl_skew(kubernetes_version: str) -> None:
    """Refuse a cluster version the layer's kubectl is not supported against (more than one minor apart)."""
    layer_minor, cluster_minor = (int(v.split(".")[1]) for v in (KUBECTL_LAYER_VERSION, kubernetes_version))
    if abs(layer_minor - cluster_minor) > 1:
        raise ValueError(
            f"kubernetes_version {kubernetes_version}: the deploy-time kubectl layer is {KUBECTL_LAYER_VERSION}, "
            "more than one minor version away (change requirements/infra.in's kubectl layer with the version)"
        )


def chart_dependencies(settings: ClusterSettings) -> list[str]:
    """The chart's Chart.yaml dependencies this deployment installs; the installer drops all the others."""
    return sorted(HELM_COMPONENT_CHARTS[name] for name, enabled in settings.helm_components.items() if enabled)


def chart_values(settings: ClusterSettings, region: str) -> dict[str, bool | str]:
    """The ``--set`` values: every component switched explicitly (the chart enables some by default)."""
    values: dict[str, bool | str] = {
        HELM_COMPONENT_VALUE_KEYS[name]: enabled for name, enabled in settings.helm_components.items()
    }
    values["health-monitoring-agent.region"] = region
    return values


class HyperPodHelmRelease(Construct):
    """Attributes: ``function``, ``release`` (the custom resource), ``access_entry``, ``values``."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        settings: ClusterSettings,
        eks_cluster: EksCluster,
        encryption_key: kms.IKey,
        log_retention_days: int,
        run_table: dynamodb.ITable,
        kubernetes_access: KubernetesApiAccess,
    ) -> None:
        super().__init__(scope, id_)
        stack = cdk.Stack.of(self)
        check_kubectl_skew(settings.kubernetes_version)
        logs = EncryptedLogGroup(
            self,
            "Logs",
            log_group_name=f"/aws/lambda/{stack.stack_name}-hyperpod-helm",
            encryption_key=encryption_key,
            retention_days=log_retention_days,
        )
        role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Installs the HyperPod dependencies Helm chart into the EKS cluster at deploy time",
        )
        role.add_to_policy(iam.PolicyStatement(actions=["eks:DescribeCluster"], resources=[eks_cluster.cluster_arn]))
        # The deploy-during-a-run guard reads the slot items (pk=SLOT) of the run table, nothing else.
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["dynamodb:Query"],
                resources=[run_table.table_arn],
                conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["SLOT"]}},
            )
        )
        if run_table.encryption_key is not None:
            role.add_to_policy(
                iam.PolicyStatement(
                    actions=["kms:Decrypt"],
                    resources=[run_table.encryption_key.key_arn],
                    conditions={"StringEquals": {"kms:ViaService": f"dynamodb.{stack.region}.amazonaws.com"}},
                )
            )
        logs.log_group.grant_write(role)
        self.placement = KubernetesClientPlacement(
            self, "KubernetesApi", access=kubernetes_access, client=f"{stack.stack_name} Helm installer"
        )
        self.function = lambda_.Function(
            self,
            "Function",
            function_name=f"{stack.stack_name}-hyperpod-helm",
            runtime=lambda_.Runtime.PYTHON_3_14,
            # The kubectl layer's helm binary is built for x86_64.
            architecture=lambda_.Architecture.X86_64,
            handler="handler.handler",
            # The handler plus the shared mtrl package (its EKS token: mtrl.kube.token); it needs no other dependency.
            code=function_code(HANDLER_DIR.name),
            layers=[KubectlV34Layer(self, "KubectlLayer")],
            role=role,
            log_group=logs.log_group,
            # helm plus sub-chart downloads; the handler answers CloudFormation before this deadline.
            timeout=cdk.Duration.minutes(15),
            memory_size=1024,
            ephemeral_storage_size=cdk.Size.mebibytes(2048),
            description="CloudFormation custom resource: helm upgrade --install of the HyperPod dependencies chart",
            vpc=self.placement.vpc,
            vpc_subnets=self.placement.subnets,
            security_groups=[self.placement.security_group],
        )
        self.placement.attach(self.function, role)
        # Helm creates CRDs, cluster roles and namespaces, which needs cluster-admin; this role is used only here.
        self.access_entry = eks_cluster.grant_cluster_admin("HelmInstallerAccess", role.role_arn)

        self.values = chart_values(settings, stack.region)
        self.release = cdk.CustomResource(
            self,
            "Release",
            service_token=self.function.function_arn,
            resource_type="Custom::HyperPodHelmRelease",
            properties={
                "ClusterName": eks_cluster.cluster_name,
                "Region": stack.region,
                "Release": RELEASE_NAME,
                "Namespace": RELEASE_NAMESPACE,
                "ChartRepository": CHART_REPOSITORY,
                "ChartRevision": settings.hyperpod_helm_chart_revision,
                "ChartSha256": settings.hyperpod_helm_chart_sha256,
                "DependencyRepositories": json.dumps(REMOTE_CHART_REPOSITORIES, sort_keys=True),
                # One JSON string, so CloudFormation does not turn booleans into "true"/"false" strings.
                "Values": json.dumps(self.values, sort_keys=True),
                "Dependencies": json.dumps(chart_dependencies(settings)),
                "RestrictedGroups": "true" if settings.hyperpod_restricted_instance_group else "false",
                "RunTable": run_table.table_name,
                "InterruptibleRuns": json.dumps(sorted(settings.hyperpod_deploy_interrupts_runs)),
            },
        )
        # The installer needs its permissions, its access entry and a working cluster (add-ons) first.
        self._prerequisites: list[Construct] = [role, self.access_entry, *eks_cluster.addons.values()]
        self.release.node.add_dependency(*self._prerequisites)
        self._cluster_name = eks_cluster.cluster_name

    def add_release(
        self,
        id_: str,
        *,
        release: str,
        namespace: str,
        source: Mapping[str, str],
        values: Mapping[str, object] | None = None,
    ) -> cdk.CustomResource:
        """Another pinned release the same function installs (``source``: the chart's properties, read by the
        handler's ``helm_release.chart_source.prepare_chart``: ``Manifests``, or ``ChartRepository`` +
        ``ChartRevision`` + ``ChartPath`` + ``ChartSha256``, with ``ApplyCrds``)."""
        stack = cdk.Stack.of(self)
        resource = cdk.CustomResource(
            self,
            id_,
            service_token=self.function.function_arn,
            resource_type="Custom::HelmRelease",
            properties={
                "ClusterName": self._cluster_name,
                "Region": stack.region,
                "Release": release,
                "Namespace": namespace,
                **source,
                "Values": json.dumps(dict(values or {}), sort_keys=True),
            },
        )
        resource.node.add_dependency(*self._prerequisites)
        return resource

    def guard(self, cluster_properties: object) -> None:
        """Make every change of the HyperPod cluster's properties an Update of this release first, so the
        deploy-during-a-run check runs (and fails the deploy) before CloudFormation updates the cluster."""
        stack = cdk.Stack.of(self)
        rendered = json.dumps(stack.resolve(cluster_properties), sort_keys=True, default=str)
        fingerprint = hashlib.sha256(rendered.encode()).hexdigest()[:32]
        default = self.release.node.default_child
        assert isinstance(default, cdk.CfnResource)
        default.add_property_override("ClusterFingerprint", fingerprint)
