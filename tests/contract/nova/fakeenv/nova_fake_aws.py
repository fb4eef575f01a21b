"""AWS faked at botocore's level inside the runner process (activated by ``sitecustomize`` when NOVA_FAKE_AWS is set).

``BaseClient._make_api_call`` is replaced: each call's request is validated against the operation's input shape
(botocore skips that when ``_make_api_call`` is replaced), recorded to ``<state>/calls.jsonl`` (service, operation,
params, region), answered from the state kept in ``<state>/`` (so a stack created by ``setup`` is there for the next
process's ``DescribeStacks``), and the answer is validated against the operation's **output** shape before it is
returned, so a canned response can never drift from the service model. Errors are the service's modelled exception
classes. HTTP through ``requests`` (the SDK's telemetry) is recorded to ``<state>/http.jsonl`` and never sent.

The world (account, roles, bucket, cluster names) comes from ``<state>/world.json``, written by the test from the
synthesized app (tests/contract/test_nova_runner_contract.py). Runs only the stdlib and botocore.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import botocore.client
from botocore.response import StreamingBody
from botocore.validate import ParamValidator


def state_dir() -> Path:
    """The fake account's folder, read at each call (a forked run, tests/contract/forked_runs.py, brings its own)."""
    return Path(os.environ["NOVA_FAKE_AWS"])


NOW = dt.datetime(2026, 12, 1, 10, 0, tzinfo=dt.UTC)


def world() -> dict[str, Any]:
    return json.loads((state_dir() / "world.json").read_text())


class State:
    """``state.json`` under an exclusive lock for the duration of one call."""

    def __enter__(self) -> dict[str, Any]:
        self._lock = open(state_dir() / "state.lock", "a+")
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        path = state_dir() / "state.json"
        self.data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        for key in ("stacks", "task_definitions", "tasks", "function_urls"):
            self.data.setdefault(key, {})
        return self.data

    def __exit__(self, *exc: object) -> None:
        (state_dir() / "state.json").write_text(json.dumps(self.data, indent=1, default=str))
        fcntl.flock(self._lock, fcntl.LOCK_UN)
        self._lock.close()


class Fail(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


def _s3_path(bucket: str, key: str) -> Path:
    return state_dir() / "s3" / bucket / key


# -- handlers: (service, operation) -> fn(params, region) -> response ----------------------------------------------

Handler = Callable[[dict[str, Any], str], dict[str, Any]]
HANDLERS: dict[tuple[str, str], Handler] = {}


def handles(service: str, operation: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        HANDLERS[(service, operation)] = fn
        return fn

    return register


@handles("sts", "GetCallerIdentity")
def _caller(params: dict[str, Any], region: str) -> dict[str, Any]:
    w = world()
    return {
        "UserId": "AROAEXAMPLE:task",
        "Account": w["account"],
        "Arn": f"arn:aws:sts::{w['account']}:assumed-role/{w['caller_role_name']}/ecs-task",
    }


def _stack_description(name: str, stack: dict[str, Any]) -> dict[str, Any]:
    return {
        "StackName": name,
        "StackId": stack["id"],
        "CreationTime": NOW,
        "StackStatus": stack["status"],
        "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in stack["outputs"].items()],
    }


@handles("cloudformation", "DescribeStacks")
def _describe_stacks(params: dict[str, Any], region: str) -> dict[str, Any]:
    name = params["StackName"]
    with State() as state:
        stack = state["stacks"].get(name)
    if stack is None or stack["status"] == "DELETE_COMPLETE":
        raise Fail("ValidationError", f"Stack with id {name} does not exist")
    return {"Stacks": [_stack_description(name, stack)]}


@handles("cloudformation", "DeleteStack")
def _delete_stack(params: dict[str, Any], region: str) -> dict[str, Any]:
    with State() as state:
        if params["StackName"] in state["stacks"]:
            state["stacks"][params["StackName"]]["status"] = "DELETE_COMPLETE"
    return {}


@handles("iam", "GetRole")
def _get_role(params: dict[str, Any], region: str) -> dict[str, Any]:
    w = world()
    name = params["RoleName"]
    if name not in {w["caller_role_name"], w["rft_role_name"]}:
        raise Fail("NoSuchEntity", f"The role with name {name} cannot be found.", 404)
    return {
        "Role": {
            "Path": "/",
            "RoleName": name,
            "RoleId": "AROA" + hashlib.sha256(name.encode()).hexdigest()[:16].upper(),
            "Arn": f"arn:aws:iam::{w['account']}:role/{name}",
            "CreateDate": NOW,
        }
    }


@handles("iam", "ListAttachedRolePolicies")
def _attached(params: dict[str, Any], region: str) -> dict[str, Any]:
    # CDK attaches the customer-managed policy <rft_role_name>Policy to the runner and the RFT role
    # (stacks/backends/hyperpod/roles.py), which is what makes the SDK skip its IAM writes.
    w = world()
    policy = f"{w['rft_role_name']}Policy"
    attached = params["RoleName"] in {w["caller_role_name"], w["rft_role_name"]}
    return {
        "AttachedPolicies": [{"PolicyName": policy, "PolicyArn": f"arn:aws:iam::{w['account']}:policy/{policy}"}]
        if attached
        else [],
        "IsTruncated": False,
    }


@handles("s3", "HeadObject")
def _head_object(params: dict[str, Any], region: str) -> dict[str, Any]:
    path = _s3_path(params["Bucket"], params["Key"])
    if not path.is_file():
        raise Fail("404", "Not Found", 404)
    data = path.read_bytes()
    return {"ContentLength": len(data), "ETag": f'"{hashlib.md5(data).hexdigest()}"', "LastModified": NOW}


@handles("s3", "GetObject")
def _get_object(params: dict[str, Any], region: str) -> dict[str, Any]:
    path = _s3_path(params["Bucket"], params["Key"])
    if not path.is_file():
        raise Fail("NoSuchKey", "The specified key does not exist.", 404)
    data = path.read_bytes()
    return {
        "Body": StreamingBody(io.BytesIO(data), len(data)),
        "ContentLength": len(data),
        "ETag": f'"{hashlib.md5(data).hexdigest()}"',
        "LastModified": NOW,
    }


@handles("s3", "PutObject")
def _put_object(params: dict[str, Any], region: str) -> dict[str, Any]:
    body = params.get("Body", b"")
    data = body.read() if hasattr(body, "read") else (body.encode() if isinstance(body, str) else bytes(body))
    path = _s3_path(params["Bucket"], params["Key"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"ETag": f'"{hashlib.md5(data).hexdigest()}"'}


@handles("s3", "HeadBucket")
def _head_bucket(params: dict[str, Any], region: str) -> dict[str, Any]:
    if params["Bucket"] != world()["data_bucket"]:
        raise Fail("404", "Not Found", 404)
    return {}


@handles("ecs", "DescribeClusters")
def _describe_clusters(params: dict[str, Any], region: str) -> dict[str, Any]:
    arn = world()["ecs_cluster_arn"]
    return {
        "clusters": [{"clusterArn": arn, "clusterName": arn.rsplit("/", 1)[-1], "status": "ACTIVE"}]
        if params["clusters"] == [arn]
        else [],
        "failures": [],
    }


@handles("ecs", "DescribeTaskDefinition")
def _describe_task_definition(params: dict[str, Any], region: str) -> dict[str, Any]:
    with State() as state:
        definition = state["task_definitions"].get(params["taskDefinition"].split(":")[0])
    if definition is None:
        raise Fail("ClientException", "Unable to describe task definition.")
    return {"taskDefinition": definition}


@handles("ecs", "RegisterTaskDefinition")
def _register_task_definition(params: dict[str, Any], region: str) -> dict[str, Any]:
    w = world()
    with State() as state:
        family = params["family"]
        revision = int((state["task_definitions"].get(family) or {}).get("revision", 0)) + 1
        definition = {
            **params,
            "taskDefinitionArn": f"arn:aws:ecs:{region}:{w['account']}:task-definition/{family}:{revision}",
            "revision": revision,
            "status": "ACTIVE",
        }
        state["task_definitions"][family] = definition
    return {"taskDefinition": definition}


@handles("ecs", "RunTask")
def _run_task(params: dict[str, Any], region: str) -> dict[str, Any]:
    w = world()
    cluster = params["cluster"].rsplit("/", 1)[-1]
    with State() as state:
        task_id = hashlib.sha256(f"{params['taskDefinition']}{len(state['tasks'])}".encode()).hexdigest()[:32]
        arn = f"arn:aws:ecs:{region}:{w['account']}:task/{cluster}/{task_id}"
        family = params["taskDefinition"].rsplit("/", 1)[-1].split(":")[0]
        command = " ".join(
            (state["task_definitions"].get(family) or {}).get("containerDefinitions", [{}])[0].get("command", [])
        )
        state["tasks"][task_id] = {"arn": arn, "family": family, "command": command}
        if "sam deploy" in command:
            # What the SDK's SAM task deploys (the starter kit's template, subscription-gated): the stack named
            # after the task family, with the outputs RFTMultiturnInfrastructure._load_existing_stack reads.
            stack = family.removesuffix("-task")
            state["stacks"][stack] = {
                "id": f"arn:aws:cloudformation:{region}:{w['account']}:stack/{stack}/{task_id[:8]}",
                "status": "CREATE_COMPLETE",
                "outputs": {
                    "RolloutFunctionName": f"{stack}-SageMaker-rollout",
                    "RolloutQueueUrl": f"https://sqs.{region}.amazonaws.com/{w['account']}/{stack}-rollout.fifo",
                    "RolloutFinishedQueueUrl": f"https://sqs.{region}.amazonaws.com/{w['account']}/{stack}-done.fifo",
                    "RequestQueueUrl": f"https://sqs.{region}.amazonaws.com/{w['account']}/{stack}-req.fifo",
                    "RequestResponseQueueUrl": f"https://sqs.{region}.amazonaws.com/{w['account']}/{stack}-resp.fifo",
                    "ProxyFunctionUrl": f"https://{task_id[:24]}.lambda-url.{region}.on.aws/",
                    "TasksTableName": f"{stack}-tasks",
                },
            }
    return {"tasks": [{"taskArn": arn, "lastStatus": "PROVISIONING", "clusterArn": params["cluster"]}], "failures": []}


@handles("ecs", "DescribeTasks")
def _describe_tasks(params: dict[str, Any], region: str) -> dict[str, Any]:
    with State() as state:
        known = {t["arn"]: t for t in state["tasks"].values()} | dict(state["tasks"])
    tasks = [
        {"taskArn": known[t]["arn"], "lastStatus": "STOPPED", "containers": [{"name": "sam", "exitCode": 0}]}
        for t in params["tasks"]
        if t in known
    ]
    return {"tasks": tasks, "failures": []}


@handles("ecs", "ListTasks")
def _list_tasks(params: dict[str, Any], region: str) -> dict[str, Any]:
    return {"taskArns": []}  # every task the fake starts has stopped


@handles("logs", "CreateLogGroup")
def _create_log_group(params: dict[str, Any], region: str) -> dict[str, Any]:
    return {}


@handles("lambda", "UpdateFunctionUrlConfig")
def _update_function_url(params: dict[str, Any], region: str) -> dict[str, Any]:
    w = world()
    name = params["FunctionName"]
    with State() as state:
        state["function_urls"][name] = params["AuthType"]
    return {
        "FunctionUrl": f"https://{hashlib.sha256(name.encode()).hexdigest()[:24]}.lambda-url.{region}.on.aws/",
        "FunctionArn": f"arn:aws:lambda:{region}:{w['account']}:function:{name}",
        "AuthType": params["AuthType"],
        "CreationTime": NOW.isoformat(),
        "LastModifiedTime": NOW.isoformat(),
    }


@handles("sqs", "GetQueueAttributes")
def _queue_attributes(params: dict[str, Any], region: str) -> dict[str, Any]:
    return {
        "Attributes": {
            "ApproximateNumberOfMessages": "0",
            "ApproximateNumberOfMessagesNotVisible": "0",
            "LastModifiedTimestamp": "1764583200",
        }
    }


@handles("sagemaker", "DescribeHubContent")
def _describe_hub_content(params: dict[str, Any], region: str) -> dict[str, Any]:
    document = json.loads((state_dir() / "hub_content_document.json").read_text())
    hub_arn = f"arn:aws:sagemaker:{region}:aws:hub/{params['HubName']}"
    return {
        "HubContentName": params["HubContentName"],
        "HubContentArn": f"{hub_arn}/Model/{params['HubContentName']}/1.0.0",
        "HubContentVersion": "1.0.0",
        "HubContentType": params["HubContentType"],
        "DocumentSchemaVersion": "2.0.0",
        "HubName": params["HubName"],
        "HubArn": hub_arn,
        "HubContentDocument": json.dumps(document),
        "HubContentStatus": "Available",
        "CreationTime": NOW,
        "HubContentDependencies": [],
    }


@handles("sagemaker", "DescribeCluster")
def _describe_cluster(params: dict[str, Any], region: str) -> dict[str, Any]:
    w = world()
    if params["ClusterName"] not in {w["hyperpod_cluster_name"], w["hyperpod_cluster_arn"]}:
        raise Fail("ResourceNotFound", f"Cluster {params['ClusterName']} not found")
    return {
        "ClusterArn": w["hyperpod_cluster_arn"],
        "ClusterName": w["hyperpod_cluster_name"],
        "ClusterStatus": "InService",
        "CreationTime": NOW,
        "InstanceGroups": [],
        # The run's group, scaled up by the adapter before submit (Nova Forge trains on a restricted group).
        "RestrictedInstanceGroups": [
            {
                "InstanceGroupName": w["gpu_group"],
                "InstanceType": w["instance_type"],
                "CurrentCount": w["instance_count"],
                "TargetCount": w["instance_count"],
                "Status": "InService",
                "ExecutionRole": f"arn:aws:iam::{w['account']}:role/{w['rft_role_name']}",
            }
        ],
        "Orchestrator": {"Eks": {"ClusterArn": w["eks_cluster_arn"]}},
    }


# -- the patch -------------------------------------------------------------------------------------------------------

_VALIDATOR = ParamValidator()


def _check(shape: Any, value: dict[str, Any], what: str) -> None:
    if shape is None:
        return
    report = _VALIDATOR.validate(value, shape)
    if report.has_errors():
        raise AssertionError(f"fake AWS {what} does not match the service model:\n{report.generate_report()}")


def _record(path: str, record: dict[str, Any]) -> None:
    with open(state_dir() / path, "a") as out:
        out.write(json.dumps(record, default=str) + "\n")


def _make_api_call(self: Any, operation_name: str, api_params: dict[str, Any]) -> dict[str, Any]:
    service = self.meta.service_model.service_name
    model = self.meta.service_model.operation_model(operation_name)
    region = self.meta.region_name
    _check(model.input_shape, api_params, f"request {service}.{operation_name}")
    _record("calls.jsonl", {"service": service, "operation": operation_name, "params": api_params, "region": region})
    handler = HANDLERS.get((service, operation_name))
    if handler is None:
        raise AssertionError(f"the fake AWS has no answer for {service}.{operation_name} (add one, from its model)")
    try:
        response = handler(dict(api_params), region)
    except Fail as failure:
        error = {"Error": {"Code": failure.code, "Message": failure.message}}
        error["ResponseMetadata"] = {"HTTPStatusCode": failure.status}  # type: ignore[assignment]
        raise self.exceptions.from_code(failure.code)(error, operation_name) from None
    _check(model.output_shape, response, f"response {service}.{operation_name}")
    response["ResponseMetadata"] = {"HTTPStatusCode": 200, "RequestId": "fake", "HTTPHeaders": {}, "RetryAttempts": 0}
    return response


def _http(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
    import requests

    _record("http.jsonl", {"method": method, "url": url})
    response = requests.Response()
    response.status_code = 200
    response._content = b""
    response.url = url
    return response


def install() -> None:
    botocore.client.BaseClient._make_api_call = _make_api_call  # type: ignore[method-assign]
    try:
        import requests.sessions
    except ImportError:
        return
    requests.sessions.Session.request = _http  # type: ignore[assignment,method-assign]
