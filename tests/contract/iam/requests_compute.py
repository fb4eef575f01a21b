"""The IAM requests of the ECS, SageMaker, CloudFormation and Lambda operations (see requests.py for the rules)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from tests.contract.iam.model import ModelError
from tests.contract.iam.operations import AwsCall, Env, pass_role, register, simple
from tests.contract.iam.policy import ABSENT, IamRequest

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


@register(
    "ecs",
    "RunTask",
    {
        "cluster": "c",
        "taskDefinition": "mtrl-sessions-loop:3",
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
    return requests + pass_role(sorted(set(roles)), "ecs-tasks.amazonaws.com", f"RunTask of {family}")


def _tasks_of(p: Mapping[str, Any], env: Env, region: str) -> list[str]:
    cluster = _cluster_arn(env, p.get("cluster"), region)
    tasks = list(p["tasks"]) if "tasks" in p else [p["task"]]
    return [_task_arn(env, cluster, str(t), region) for t in tasks]


def _on_cluster(p: Mapping[str, Any], env: Env, region: str) -> Mapping[str, Any]:
    return {"ecs:cluster": _cluster_arn(env, p.get("cluster"), region)}


simple("ecs", "DescribeTasks", _tasks_of, {"cluster": "c", "tasks": ["t1"]}, context=_on_cluster)
simple("ecs", "StopTask", _tasks_of, {"cluster": "c", "task": "t1"}, context=_on_cluster)
simple(
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
    simple(
        "ecs",
        _name,
        lambda p, e, r: "*",  # no resource-level permissions (Service Authorization Reference)
        {"taskDefinition": "f:1"} if _name != "ListTaskDefinitions" else {"familyPrefix": "f"},
    )
simple(
    "ecs",
    "DescribeClusters",
    lambda p, e, r: [_cluster_arn(e, c, r) for c in p.get("clusters") or ["default"]],
    {"clusters": ["c"]},
)


@register(
    "ecs",
    "RegisterTaskDefinition",
    {"family": "f", "containerDefinitions": [{"name": "c", "image": "i"}], "taskRoleArn": "arn:aws:iam::1:role/r"},
)
def _ecs_register_task_definition(call: AwsCall, env: Env) -> list[IamRequest]:
    p = call.params
    tags = {t["key"]: t["value"] for t in p.get("tags") or []}
    requests = [IamRequest("ecs:RegisterTaskDefinition", "*", {"aws:TagKeys": sorted(tags) if tags else ABSENT})]
    roles = [str(p[k]) for k in ("taskRoleArn", "executionRoleArn") if p.get(k)]
    return requests + pass_role(roles, "ecs-tasks.amazonaws.com", "RegisterTaskDefinition names the roles")


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
    simple(
        "sagemaker",
        _name,
        _hyperpod_cluster,
        {"ClusterName": "mtrl-hyperpod", **({"NodeId": "i-1"} if _name == "DescribeClusterNode" else {})},
    )


@register(
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
    return requests + pass_role(roles, "sagemaker.amazonaws.com", "UpdateCluster states the groups' ExecutionRole")


simple("sagemaker", "ListClusters", lambda p, e, r: "*", {})


def _hub_content(p: Mapping[str, Any], env: Env, region: str) -> str:
    # SageMaker's public hub is owned by the account "aws": arn:aws:sagemaker:<region>:aws:hub-content/…
    owner = "aws" if p["HubName"] == "SageMakerPublicHub" else env.account
    resource = f"hub-content/{p['HubName']}/{p['HubContentType']}/{p['HubContentName']}"
    return f"arn:{env.partition}:sagemaker:{region}:{owner}:{resource}"


simple(
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
    simple(
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
        requests += pass_role([p["RoleARN"]], "cloudformation.amazonaws.com", f"{call.operation} with a role")
    return requests


register("cloudformation", "CreateStack", {"StackName": "s", "TemplateBody": "{}", "RoleARN": "arn:aws:iam::1:role/r"})(
    _stack_write
)
register("cloudformation", "UpdateStack", {"StackName": "s", "TemplateBody": "{}"})(_stack_write)


# -- Lambda --------------------------------------------------------------------------------------------------------


def _function_arn(env: Env, function: str, region: str, qualifier: str | None = None) -> str:
    arn = function if function.startswith("arn:") else env.arn("lambda", f"function:{function}", region)
    return f"{arn}:{qualifier}" if qualifier else arn


simple(
    "lambda",
    "Invoke",
    lambda p, e, r: _function_arn(e, p["FunctionName"], r, p.get("Qualifier")),
    {"FunctionName": "f", "Payload": b"{}"},
    action="lambda:InvokeFunction",
    context=lambda p, e, r: {"lambda:InvokedViaFunctionUrl": ABSENT},
)
for _name in ("GetFunction", "GetFunctionUrlConfig", "UpdateFunctionUrlConfig", "DeleteFunction"):
    simple(
        "lambda",
        _name,
        lambda p, e, r: _function_arn(e, p["FunctionName"], r, p.get("Qualifier")),
        {"FunctionName": "f", **({"AuthType": "AWS_IAM"} if _name == "UpdateFunctionUrlConfig" else {})},
        context=(lambda p, e, r: {"lambda:FunctionUrlAuthType": p.get("AuthType", ABSENT)})
        if _name == "UpdateFunctionUrlConfig"
        else None,
    )


@register("lambda", "InvokeFunctionUrl", {"FunctionName": "f", "AuthType": "AWS_IAM"}, api=False)
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
