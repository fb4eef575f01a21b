"""Record every AWS call a component makes through a boto3 session, as IAM actions plus the resource parameters.

The recording is what an IAM-contract evaluator needs (which action, on which named resource, by which role):
``AwsCallRecorder.attach(session, who="backend")`` hooks botocore's ``before-parameter-build`` event, which fires for
every call (faked or moto-served) before any handler answers it. ``actions(who)`` gives the set of IAM actions;
``to_json()`` the full list, for feeding to the policy evaluator of tests/contract/ once it exists.

The expected sets below are the serverless adapter's and agent's documented calls; the template tests check that the
synthesized policies grant them (tests/unit/stacks/test_backends_wiring.py, test_backend_roles.py).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

import boto3

# Parameters that name the resource a call acts on (kept in the record; everything else is dropped).
_RESOURCE_PARAMS = (
    "Bucket",
    "Key",
    "RoleName",
    "Arn",
    "JobName",
    "JobCategory",
    "RoleArn",
    "ModelPackageGroupName",
    "FunctionName",
    "agentRuntimeArn",
    "qualifier",
    "logGroupName",
    "JobArn",
)

# What the serverless adapter calls with the backend function's role (serverless.py and its modules).
SERVERLESS_ADAPTER_ACTIONS = frozenset(
    {
        "s3:GetObject",
        "s3:PutObject",
        "s3:GetBucketLocation",
        "iam:GetRole",
        "sts:GetCallerIdentity",  # needs no permission
        "sagemaker:DescribeMlflowApp",
        "sagemaker:DescribeModelPackageGroup",
        "sagemaker:CreateJob",
        "sagemaker:DescribeJob",
        "sagemaker:StopJob",
        "lambda:InvokeFunction",
        "bedrock-agentcore:InvokeAgentRuntime",
        "logs:FilterLogEvents",
        "cloudwatch:GetMetricData",  # the agent's episode lines, for the run's signal rows (mtrl.backends.episode_rows)
    }
)
# What the agent Lambda calls with the agent role: AmazonSageMakerJobRuntimeAccess (AWS managed policy reference).
AGENT_ACTIONS = frozenset(
    {"sagemaker:Sample", "sagemaker:SampleWithResponseStream", "sagemaker:CompleteRollout", "sagemaker:UpdateReward"}
)
# The IAM action names of the operations whose API name differs from the action.
_ACTION_OF = {
    "lambda:Invoke": "lambda:InvokeFunction",
    "s3:UploadPart": "s3:PutObject",
    "monitoring:GetMetricData": "cloudwatch:GetMetricData",  # CloudWatch signs as 'monitoring'; IAM says cloudwatch
}


@dataclass(frozen=True)
class AwsCall:
    who: str
    action: str
    resource: dict[str, Any]


@dataclass
class AwsCallRecorder:
    calls: list[AwsCall] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, session: boto3.Session, who: str) -> None:
        def record(params: dict[str, Any], model: Any, **_: Any) -> None:
            service = model.service_model
            prefix = service.signing_name or service.endpoint_prefix
            action = f"{prefix}:{model.name}"
            action = _ACTION_OF.get(action, action)
            if action in {"s3:CreateMultipartUpload", "s3:CompleteMultipartUpload"}:
                action = "s3:PutObject"
            resource = {name: params[name] for name in _RESOURCE_PARAMS if name in params}
            with self._lock:
                self.calls.append(AwsCall(who, action, resource))

        session.events.register("before-parameter-build", record)

    def actions(self, who: str | None = None) -> set[str]:
        return {call.action for call in self.calls if who is None or call.who == who}

    def to_json(self) -> str:
        return json.dumps([call.__dict__ for call in self.calls], default=str, indent=1)
