"""The verl backend's stack side (``mtrl.backends.verl``): what its adapter may do from the backend function (read
the EKS API endpoint, check the model copies and the trainer image), its access to the run namespace, and the
deploy-time values it reads (``VerlRunConfig``, via ``verl_pipeline_values``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_iam as iam

from mtrl.backends.verl.catalog import image_parameter, models_path
from mtrl.backends.verl.config import VerlRunConfig, verl_pipeline_values
from mtrl.backends.verl.offline import offline_cluster_names
from mtrl.backends.verl.run_identity import POD_IDENTITY_PRINCIPAL, trainer_role_name
from mtrl.backends.verl.supply import MODELS_PREFIX, image_repository_name
from mtrl.contracts.hub import MODEL_SUMS_FILE
from mtrl.settings.verl import ECR_IMAGE, VerlModelSettings, model_sums_object
from stacks.backends.contract import StackInputs
from stacks.backends.permissions import BackendFunctionPolicy, cluster_group_statements, imported_bucket_arn
from stacks.constructs.kuberay import grant_pipeline_access


@dataclass(frozen=True)
class VerlTargets:
    """What a verl run touches besides the training group (``cluster_group_statements``): the EKS cluster whose API
    it calls (endpoint and CA), and what Preflight checks exists: each configured model copy's SHA256SUMS object and
    the trainer image's repository."""

    eks_cluster_arn: str
    model_sums_object_arns: tuple[str, ...] = ()
    image_repository_arn: str | None = None  # only for an image in ECR
    trainer_role_arn: str | None = None  # each run's Pod Identity association names it
    pod_identity_associations_arn: str | None = None  # the cluster's associations (their ids are generated)

    @classmethod
    def of(
        cls,
        *,
        eks_cluster_arn: str,
        models: Sequence[VerlModelSettings],
        image_uri: str | None,
        trainer_role_arn: str | None = None,
        pod_identity_associations_arn: str | None = None,
    ) -> VerlTargets:
        """The targets of the deployment's verl settings (``verl_models``, ``verl_image_uri``)."""
        sums = tuple(
            f"arn:{cdk.Aws.PARTITION}:s3:::{'/'.join(model_sums_object(model.s3_uri))}"
            for model in models
            if model.s3_uri is not None
        )
        found = ECR_IMAGE.match(image_uri or "")
        repository = (
            f"arn:{cdk.Aws.PARTITION}:ecr:{found['region']}:{found['account']}:repository/{found['repository']}"
            if found
            else None
        )
        return cls(
            eks_cluster_arn=eks_cluster_arn,
            model_sums_object_arns=sums,
            image_repository_arn=repository,
            trainer_role_arn=trainer_role_arn,
            pod_identity_associations_arn=pod_identity_associations_arn,
        )


def _catalog_statements(prefix: str, bucket_arn: str) -> list[iam.PolicyStatement]:
    """Preflight reads the deployment's catalog (mtrl.backends.verl.catalog), then checks what it names: a registered
    copy's SHA256SUMS under models/ and a built image in the deployment's own repository."""
    parameter = f"arn:{cdk.Aws.PARTITION}:ssm:{cdk.Aws.REGION}:{cdk.Aws.ACCOUNT_ID}:parameter"
    models = models_path(prefix)
    return [
        iam.PolicyStatement(
            sid="VerlReadCatalog",
            actions=["ssm:GetParameter", "ssm:GetParametersByPath"],
            resources=[f"{parameter}{image_parameter(prefix)}", f"{parameter}{models}", f"{parameter}{models}/*"],
        ),
        iam.PolicyStatement(
            sid="VerlPreflightRegisteredCopies",
            actions=["s3:GetObject"],
            resources=[f"{bucket_arn}/{MODELS_PREFIX}*/{MODEL_SUMS_FILE}"],
        ),
        iam.PolicyStatement(
            sid="VerlPreflightBuiltImage",
            actions=["ecr:DescribeImages"],
            resources=[
                f"arn:{cdk.Aws.PARTITION}:ecr:{cdk.Aws.REGION}:{cdk.Aws.ACCOUNT_ID}:repository/"
                f"{image_repository_name(prefix)}"
            ],
        ),
    ]


def _verl_statements(verl: VerlTargets) -> list[iam.PolicyStatement]:
    # The Kubernetes calls themselves are authorised by the cluster's access entry (RBAC), not IAM.
    statements = [
        iam.PolicyStatement(
            sid="VerlReadClusterEndpoint", actions=["eks:DescribeCluster"], resources=[verl.eks_cluster_arn]
        )
    ]
    if verl.model_sums_object_arns:  # GetObject: the copy's pinned SHA256SUMS, nothing else of the bucket
        statements.append(
            iam.PolicyStatement(
                sid="VerlPreflightModelCopies",
                actions=["s3:GetObject"],
                resources=list(verl.model_sums_object_arns),
            )
        )
    if verl.image_repository_arn is not None:  # DescribeImages: the pinned digest or tag exists
        statements.append(
            iam.PolicyStatement(
                sid="VerlPreflightImage", actions=["ecr:DescribeImages"], resources=[verl.image_repository_arn]
            )
        )
    if verl.trainer_role_arn is not None and verl.pod_identity_associations_arn is not None:
        # Submit gives each run's service account the trainer role narrowed to the run (run_identity), Cleanup
        # removes it. EKS needs iam:PassRole on the role to create an association (EKS User Guide, "Assign an IAM
        # role to a Kubernetes service account").
        statements += [
            iam.PolicyStatement(
                sid="VerlRunPodIdentity",
                actions=["eks:CreatePodIdentityAssociation", "eks:ListPodIdentityAssociations"],
                resources=[verl.eks_cluster_arn],
            ),
            iam.PolicyStatement(
                sid="VerlRunPodIdentityDelete",
                actions=["eks:DeletePodIdentityAssociation"],
                resources=[verl.pod_identity_associations_arn],
            ),
            iam.PolicyStatement(
                sid="VerlPassTrainerRole",
                actions=["iam:PassRole"],
                resources=[verl.trainer_role_arn],
                conditions={"StringEquals": {"iam:PassedToService": POD_IDENTITY_PRINCIPAL}},
            ),
        ]
    return statements


def trainer_role_arn(prefix: str) -> str:
    return f"arn:{cdk.Aws.PARTITION}:iam::{cdk.Aws.ACCOUNT_ID}:role/{trainer_role_name(prefix)}"


class VerlStackSide:
    """verl RayJobs on the HyperPod cluster's training group, submitted through the EKS API."""

    def add_to_pipeline(self, inputs: StackInputs) -> None:
        settings = inputs.settings
        associations = (
            f"arn:{cdk.Aws.PARTITION}:eks:{cdk.Aws.REGION}:{cdk.Aws.ACCOUNT_ID}:podidentityassociation/"
            f"{offline_cluster_names(settings)[1]}/*"  # the name the cluster stack gives it (no cross-stack token)
        )
        targets = VerlTargets.of(
            eks_cluster_arn=inputs.cluster.eks_cluster_arn,
            models=settings.verl_models,
            image_uri=settings.verl_image_uri,
            trainer_role_arn=trainer_role_arn(settings.prefix),
            pod_identity_associations_arn=associations,
        )
        catalog = _catalog_statements(settings.prefix, imported_bucket_arn(inputs))
        # The adapter scales the training group itself (GpuCapacity, as hyperpod scales its group): its own statements,
        # so a deployment without the hyperpod backend still grants them.
        group, group_reasons = cluster_group_statements(
            cdk.Stack.of(inputs.scope), inputs.cluster.hyperpod_cluster_arn, inputs.cluster.node_role_arn
        )
        # Every statement names its cluster, objects, repository and role; the wildcards are the associations' ids
        # (generated by EKS), the catalog's own names and an existing cluster's ARN.
        BackendFunctionPolicy(
            inputs.scope,
            "BackendPermissionsVerl",
            role=inputs.function_role,
            statements=[*group, *_verl_statements(targets), *catalog],
            wildcard_reasons={
                **group_reasons,
                associations: "Pod Identity association ids are generated by EKS; the cluster's only (run pods).",
                catalog[1].resources[
                    0
                ]: "The SHA256SUMS of the model copies mtrl model import registers (models/<id>/<revision>/), "
                "read by Preflight to check the registered checksum.",
                catalog[0].resources[2]: "The deployment's registered models, one parameter per model id under "
                "/<prefix>/models/ (mtrl model import).",
            },
        )
        if inputs.cluster.kuberay_namespace is not None:
            # The adapter runs in the backend function: it reaches the run namespace through its Kubernetes group.
            grant_pipeline_access(
                inputs.scope,
                "VerlPipelineEksAccess",
                cluster_name=inputs.cluster.eks_cluster_name,
                role=inputs.function_role,
                namespace=inputs.cluster.kuberay_namespace,
            )

    def pipeline_values(self, inputs: StackInputs) -> VerlRunConfig:
        # The training group, the EKS API, the run namespace, the ceilings, and the MLflow app the trainer logs to.
        return verl_pipeline_values(
            inputs.settings,
            region=inputs.region,
            hyperpod_cluster_name=inputs.cluster.hyperpod_cluster_name,
            eks_cluster_name=inputs.cluster.eks_cluster_name,
            mlflow_app_arn=inputs.backends.mlflow_app_arn,
            trainer_role_arn=trainer_role_arn(inputs.settings.prefix),
        )
