"""The AWS identity of a verl run's pods: an IAM role the RayJob's service account gets through EKS Pod Identity.

The trainer (``mtrl.backends.verl.train``, on the Ray head) reads the run's rows and writes its progress, signal rows,
evaluation and outputs under ``runs/``, reads the operator's model copies (configured, or registered under ``models/``)
and logs to the MLflow app; nothing else.
EKS Pod Identity needs the ``eks-pod-identity-agent`` add-on (``EksCluster`` installs it) and a role trusted by
``pods.eks.amazonaws.com`` for both ``sts:AssumeRole`` and ``sts:TagSession`` (EKS User Guide, "Create IAM role
with trust policy required by EKS Pod Identity").
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mtrl.backends.verl.access import TRAINER_SERVICE_ACCOUNT
from mtrl.backends.verl.supply import MODELS_PREFIX
from mtrl.settings.verl import VerlModelSettings
from stacks.nag import acknowledge, nag_resource

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


class VerlTrainerIdentity(Construct):
    """Attributes: ``role``, ``association``.

    Props: ``prefix``; ``cluster_name`` and ``namespace`` (the RayJobs' namespace, whose ``mtrl-verl-trainer``
    service account the pods run as); ``data_bucket``/``data_key``; ``models`` (their S3 copies are readable);
    ``mlflow_app_arn`` (trainer metrics).
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        prefix: str,
        cluster_name: str,
        namespace: str,
        data_bucket: s3.IBucket,
        data_key: kms.IKey,
        models: Sequence[VerlModelSettings],
        mlflow_app_arn: str,
    ) -> None:
        super().__init__(scope, id_)
        self.role = iam.Role(
            self,
            "Role",
            role_name=f"{prefix}-verl-trainer",
            description=f"{prefix}: the pods of verl runs (service account {namespace}/{TRAINER_SERVICE_ACCOUNT})",
            assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL)),
        )
        copies = [model.s3_uri.removeprefix("s3://") for model in models if model.s3_uri is not None]
        statements = [
            iam.PolicyStatement(
                sid="RunObjects",  # rows in, progress/signals/evaluation/checkpoints/outputs out
                actions=["s3:GetObject", "s3:PutObject"],
                resources=[data_bucket.arn_for_objects("runs/*")],
            ),
            iam.PolicyStatement(
                sid="DataKey", actions=["kms:Decrypt", "kms:GenerateDataKey"], resources=[data_key.key_arn]
            ),
            iam.PolicyStatement(
                sid="MlflowApp",
                actions=["sagemaker:DescribeMlflowApp", "sagemaker:CallMlflowAppApi"],
                resources=[mlflow_app_arn],
            ),
        ]
        # The copies mtrl model import registers after deploy (mtrl.backends.verl.catalog), under models/.
        registered = data_bucket.arn_for_objects(f"{MODELS_PREFIX}*")
        statements.append(
            iam.PolicyStatement(sid="RegisteredModelCopies", actions=["s3:GetObject"], resources=[registered])
        )
        if copies:
            statements.append(
                iam.PolicyStatement(
                    sid="ModelCopies",  # the operator's verified copies (SHA256SUMS and the files it lists)
                    actions=["s3:GetObject"],
                    resources=[f"arn:{cdk.Aws.PARTITION}:s3:::{copy}*" for copy in copies],
                )
            )
        for statement in statements:
            self.role.add_to_policy(statement)
        self.association = eks.CfnPodIdentityAssociation(
            self,
            "Association",
            cluster_name=cluster_name,
            namespace=namespace,
            service_account=TRAINER_SERVICE_ACCOUNT,
            role_arn=self.role.role_arn,
        )
        policy = self.role.node.find_child("DefaultPolicy")
        acknowledge(
            policy,
            f"AwsSolutions-IAM5[Resource::{nag_resource(self, data_bucket.arn_for_objects('runs/*'))}]",
            "Run objects are per-run keys under runs/ (run ids are generated when a dataset is uploaded).",
        )
        acknowledge(
            policy,
            f"AwsSolutions-IAM5[Resource::{nag_resource(self, registered)}]",
            "Registered model copies (models/<id>/<revision>/: the files their registered SHA256SUMS lists), read "
            "only; which one a run uses is decided at its Preflight, after deploy.",
        )
        for copy in copies:
            acknowledge(
                policy,
                f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::{copy}*]",
                "The operator's model copy: the files its pinned SHA256SUMS lists, under its prefix.",
            )
