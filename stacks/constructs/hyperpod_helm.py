"""Deploy-time installer of the HyperPod dependencies Helm chart (must exist before the HyperPod cluster).

A Lambda-backed custom resource runs ``helm upgrade --install`` of a pinned commit of the chart (see
``lambda/hyperpod_helm/handler.py``), so re-running it, or retrying after a partial install, converges.
The function runs outside the VPC and reaches the cluster's public endpoint with its own access entry.
"""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer
from constructs import Construct

from mtrl.settings.cluster import HELM_COMPONENT_VALUE_KEYS, ClusterSettings
from stacks.constructs.eks_cluster import EksCluster
from stacks.constructs.encrypted_log_group import EncryptedLogGroup

HANDLER_DIR = Path(__file__).resolve().parents[2] / "lambda" / "hyperpod_helm"
CHART_REPOSITORY = "aws/sagemaker-hyperpod-cli"
RELEASE_NAME = "hyperpod-dependencies"
RELEASE_NAMESPACE = "kube-system"


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
    ) -> None:
        super().__init__(scope, id_)
        stack = cdk.Stack.of(self)
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
        logs.log_group.grant_write(role)
        self.function = lambda_.Function(
            self,
            "Function",
            function_name=f"{stack.stack_name}-hyperpod-helm",
            runtime=lambda_.Runtime.PYTHON_3_14,
            # The kubectl layer's helm binary is built for x86_64.
            architecture=lambda_.Architecture.X86_64,
            handler="handler.handler",
            code=lambda_.Code.from_asset(str(HANDLER_DIR), exclude=["__pycache__", "*.pyc"]),
            layers=[KubectlV35Layer(self, "KubectlLayer")],
            role=role,
            log_group=logs.log_group,
            # helm plus sub-chart downloads; the handler answers CloudFormation before this deadline.
            timeout=cdk.Duration.minutes(15),
            memory_size=1024,
            ephemeral_storage_size=cdk.Size.mebibytes(2048),
            description="CloudFormation custom resource: helm upgrade --install of the HyperPod dependencies chart",
        )
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
                # One JSON string, so CloudFormation does not turn booleans into "true"/"false" strings.
                "Values": json.dumps(self.values, sort_keys=True),
            },
        )
        # The installer needs its permissions, its access entry and a working cluster (add-ons) first.
        self.release.node.add_dependency(role, self.access_entry, *eks_cluster.addons.values())
