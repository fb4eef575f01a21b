"""The AWS identity of verl runs' pods: the trainer role, which each run's EKS Pod Identity association narrows to
that run (``mtrl.backends.verl.run_identity``: the adapter creates the association at Provision with a session policy
naming the run's dataset, held-out rows, model copy and ``runs/<id>/`` prefix, and deletes it at Cleanup).

The role's own policy is the upper bound every run shares: objects under ``runs/``, the uploaded datasets
(``training-data/``, ``eval-data/``), the operator's model copies (configured, or registered under ``models/`` by
``mtrl model import``), the data key through S3 only
(``kms:ViaService``), and the MLflow app. EKS Pod Identity needs the ``eks-pod-identity-agent`` add-on (``EksCluster``
installs it) and a role trusted by ``pods.eks.amazonaws.com`` for ``sts:AssumeRole`` and ``sts:TagSession`` (EKS User
Guide, "Create IAM role with trust policy required by EKS Pod Identity"). No association is made here: a pod of the
namespace gets this role only through its run's association. The trust policy carries no
``aws:RequestTag/kubernetes-namespace`` or ``kubernetes-service-account`` condition because an association with a
session policy must disable EKS's session tags (EKS API reference, ``CreatePodIdentityAssociation``, ``policy``);
the association itself binds the namespace and the run's service account.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mtrl.backends.verl.run_identity import POD_IDENTITY_PRINCIPAL, trainer_role_name
from mtrl.backends.verl.supply import MODELS_PREFIX
from mtrl.settings.verl import VerlModelSettings
from stacks.nag import acknowledge, nag_resource

# The prefixes a run's inputs come from (mtrl.client.submit: uploads; the Validate phase writes splits under runs/).
INPUT_PREFIXES = ("training-data/*", "eval-data/*")


class VerlTrainerIdentity(Construct):
    """Attributes: ``role``.

    Props: ``prefix``; ``cluster_name`` and ``namespace`` (where the RayJobs run: the role's description);
    ``data_bucket``/``data_key``; ``models`` (their S3 copies are readable); ``mlflow_app_arn`` (trainer metrics).
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
            role_name=trainer_role_name(prefix),
            description=f"{prefix}: verl run pods ({cluster_name} {namespace}), each scoped by its run's association",
            assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL)),
        )
        copies = [model.s3_uri.removeprefix("s3://") for model in models if model.s3_uri is not None]
        runs = data_bucket.arn_for_objects("runs/*")
        inputs = [data_bucket.arn_for_objects(prefix_) for prefix_ in INPUT_PREFIXES]
        statements = [
            iam.PolicyStatement(
                sid="RunObjects",  # splits and rows in, progress/signals/evaluation/checkpoints/outputs out
                actions=["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"],
                resources=[runs],
            ),
            iam.PolicyStatement(sid="RunInputs", actions=["s3:GetObject"], resources=inputs),
            iam.PolicyStatement(
                sid="DataKey",
                actions=["kms:Decrypt", "kms:GenerateDataKey"],
                resources=[data_key.key_arn],
                # The key only through S3 (the bucket's objects), never directly (AWS KMS Developer Guide,
                # "kms:ViaService").
                conditions={"StringEquals": {"kms:ViaService": f"s3.{cdk.Aws.REGION}.amazonaws.com"}},
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
        policy = self.role.node.find_child("DefaultPolicy")
        acknowledge(
            policy,
            f"AwsSolutions-IAM5[Resource::{nag_resource(self, runs)}]",
            "The upper bound of every run's objects; each run's Pod Identity session policy narrows it to runs/<id>/.",
        )
        for arn in inputs:
            acknowledge(
                policy,
                f"AwsSolutions-IAM5[Resource::{nag_resource(self, arn)}]",
                "Uploaded datasets; each run's Pod Identity session policy narrows it to the run's own objects.",
            )
        acknowledge(
            policy,
            f"AwsSolutions-IAM5[Resource::{nag_resource(self, registered)}]",
            "Registered model copies (models/<id>/<revision>/), read only; each run's Pod Identity session policy "
            "narrows it to the copy its Preflight chose.",
        )
        for copy in copies:
            acknowledge(
                policy,
                f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::{copy}*]",
                "The operator's model copy: the files its pinned SHA256SUMS lists, under its prefix.",
            )
