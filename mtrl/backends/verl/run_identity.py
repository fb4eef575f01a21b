"""The AWS identity of one verl run's pods: a service account of their own, and an EKS Pod Identity association that
gives it the deployment's trainer role scoped down to this run by a session policy.

The trainer role (``stacks/constructs/verl_trainer_identity.py``) is the upper bound every run shares: the run
prefixes, the uploaded datasets, the model copies. What one run reads is known only when it is submitted (its
dataset object, its held-out object, its model copy), so the adapter creates the association at Provision (it takes
seconds to take effect, and the pods must find it when KubeRay creates them) with an inline session policy naming
exactly those objects and the run's own ``runs/<id>/`` prefix, and deletes it at Cleanup. The effective
permissions are the intersection of the role's policy and the session policy (EKS API reference,
``CreatePodIdentityAssociation``: ``policy``); an association with a policy must turn EKS's automatic
session tags off (same page: "When using this policy, disableSessionTags must be set to true"), so the
namespace and service account are bound by the association itself (EKS issues its credentials only to pods of
that namespace running as that service account), not by tag conditions in the role's trust policy.
"""

from __future__ import annotations

from typing import Any

from mtrl.backends._aws import S3Uri
from mtrl.contracts.backend import RunContext
from mtrl.settings.verl import VerlModelSettings

POD_IDENTITY_KIND = "verl-pod-identity"
POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


def trainer_role_name(prefix: str) -> str:
    """The deployment's verl trainer role (VerlTrainerIdentity creates it; the backend function passes it)."""
    return f"{prefix}-verl-trainer"


def partition_of(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def _object_arn(partition: str, uri: S3Uri, *, prefix: bool = False) -> str:
    return f"arn:{partition}:s3:::{uri.bucket}/{uri.key}{'*' if prefix else ''}"


def run_prefix(run: RunContext) -> S3Uri:
    """``runs/<id>/``: everything the run writes (and reads back: its splits, progress, checkpoints)."""
    output = S3Uri.parse(run.output_uri)
    return S3Uri(output.bucket, output.key.rstrip("/") + "/")


def session_policy(run: RunContext, model: VerlModelSettings, *, region: str) -> dict[str, Any]:
    """The run's session policy: read its dataset, its held-out rows and its model copy; read and write its prefix.

    KMS and MLflow appear with ``*``: the role's own statements name the key (through S3 only) and the MLflow app,
    and a session policy can only narrow them.
    """
    partition = partition_of(region)
    inputs = [_object_arn(partition, S3Uri.parse(run.dataset_uri))]
    if run.eval_dataset_uri:
        inputs.append(_object_arn(partition, S3Uri.parse(run.eval_dataset_uri)))
    if model.s3_uri is not None:
        inputs.append(_object_arn(partition, S3Uri.parse(model.s3_uri), prefix=True))
    own = _object_arn(partition, run_prefix(run), prefix=True)
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "RunInputs", "Effect": "Allow", "Action": "s3:GetObject", "Resource": sorted(set(inputs))},
            {
                "Sid": "RunPrefix",
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"],
                "Resource": own,
            },
            {"Sid": "RunDataKey", "Effect": "Allow", "Action": ["kms:Decrypt", "kms:GenerateDataKey"], "Resource": "*"},
            {
                "Sid": "RunMlflow",
                "Effect": "Allow",
                "Action": ["sagemaker:DescribeMlflowApp", "sagemaker:CallMlflowAppApi"],
                "Resource": "*",
            },
        ],
    }


def service_account_manifest(name: str, namespace: str, labels: dict[str, str], run_id: str) -> dict[str, Any]:
    """The run's own service account (no Kubernetes permissions; its AWS role comes from the run's association)."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": {"mtrl/run-id": run_id}},
    }
