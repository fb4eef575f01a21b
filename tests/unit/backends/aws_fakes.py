"""Test doubles for the backend adapters: moto for what it implements, and model-validated fakes for what it does not.

moto 5.2.5 has no SageMaker ``CreateJob``/``DescribeJob``/``StopJob``/``UpdateCluster``/``ListClusterEvents`` and
cannot run a Lambda or an AgentCore runtime. ``FakeAws`` answers those operations from Python handlers, hooked on
botocore's ``before-call`` event: by then botocore has already validated the request against the service model
(a wrong field name or type fails the test), and every fake response is validated against the operation's output
shape, as ``botocore.stub.Stubber`` does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import boto3
import botocore.loaders
import botocore.session
from botocore.awsrequest import AWSResponse
from botocore.validate import ParamValidator
from moto.ec2.models.elastic_network_interfaces import NetworkInterface
from moto.moto_api import state_manager

from mtrl.contracts.backend import CreatedResource

REGION = "us-east-1"
# One model loader for every test session: parsing the SageMaker service model takes about a second, so a fresh
# boto3.Session per test (needed for per-test event hooks) would otherwise pay it again and again.
_LOADER = botocore.loaders.create_loader()


def new_session() -> boto3.Session:
    core = botocore.session.get_session()
    core.register_component("data_loader", _LOADER)
    return boto3.Session(botocore_session=core, region_name=REGION)


ACCOUNT = "123456789012"  # moto's default account


# The serverless job role as the backends stack creates it (trusted by the SageMaker job principal).
SERVERLESS_JOB_ROLE = "mtrl-serverless-job"
JOB_TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "job.sagemaker.amazonaws.com"},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
        }
    ],
}


def create_serverless_job_role(session: boto3.Session) -> str:
    """The job role in moto; returns its ARN."""
    role = session.client("iam").create_role(
        RoleName=SERVERLESS_JOB_ROLE, AssumeRolePolicyDocument=json.dumps(JOB_TRUST)
    )
    return str(role["Role"]["Arn"])


@contextmanager
def moto_ecs_tasks() -> Iterator[None]:
    """Patch moto so awsvpc ECS tasks can be started and stay RUNNING (the hyperpod adapter's runner tasks)."""
    # moto 5.2.5 builds an awsvpc task's attachment from an ENI attribute it never sets; give it one.
    original_dns = getattr(NetworkInterface, "private_dns_name", None)
    NetworkInterface.private_dns_name = property(lambda self: "ip-10-0-1-10.ec2.internal")  # type: ignore[attr-defined]
    # moto advances a task's lastStatus towards STOPPED on every DescribeTasks; keep started tasks RUNNING.
    state_manager.set_transition(model_name="ecs::task", transition={"progression": "manual", "times": 10**9})
    try:
        yield
    finally:
        state_manager.unset_transition("ecs::task")
        if original_dns is None:
            del NetworkInterface.private_dns_name  # type: ignore[attr-defined]
        else:
            NetworkInterface.private_dns_name = original_dns  # type: ignore[attr-defined]


def create_task_network(session: boto3.Session, *, cluster_name: str, worker_container: str) -> tuple[str, str, str]:
    """What the stacks give the hyperpod adapter's ECS tasks, in moto: (subnet id, security group id, cluster ARN),
    and the reward-worker and Nova Forge runner task definitions."""
    ec2 = session.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    sg = ec2.create_security_group(GroupName="workers", Description="reward workers", VpcId=vpc)["GroupId"]
    ecs = session.client("ecs")
    cluster = ecs.create_cluster(clusterName=cluster_name)["cluster"]["clusterArn"]
    for family, container in (("mtrl-reward-worker", worker_container), ("mtrl-nova-runner", "runner")):
        ecs.register_task_definition(
            family=family,
            networkMode="awsvpc",
            requiresCompatibilities=["FARGATE"],
            cpu="1024",
            memory="2048",
            containerDefinitions=[{"name": container, "image": "x", "memory": 2048}],
        )
    return subnet, sg, cluster


class FakeError(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


Handler = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass
class FakeAws:
    session: boto3.Session
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def on(self, service: str, operation: str, handler: Handler) -> None:
        model = self.session._session.get_service_model(service)
        output_shape = model.operation_model(operation).output_shape

        def hook(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
            body = params.get("body") or b"{}"
            decoded = json.loads(body) if model.protocol in {"json", "rest-json"} and body[:1] == b"{" else {}
            decoded.update(
                {
                    "__uri__": params.get("url_path", ""),
                    "__query__": dict(params.get("query_string") or {}),
                    "__headers__": dict(params.get("headers", {})),
                }
            )
            self.calls.append((operation, decoded))
            try:
                result = handler(decoded)
            except FakeError as error:
                return AWSResponse("", error.status, {}, None), {
                    "Error": {"Code": error.code, "Message": error.message},
                    "ResponseMetadata": {"HTTPStatusCode": error.status},
                }
            if output_shape is not None:
                report = ParamValidator().validate(result, output_shape)
                assert not report.has_errors(), f"fake {operation} response is invalid: {report.generate_report()}"
            return AWSResponse("", 200, {}, None), {**result, "ResponseMetadata": {"HTTPStatusCode": 200}}

        self.session.events.register(f"before-call.{model.service_id.hyphenize()}.{operation}", hook)

    def called(self, operation: str) -> list[dict[str, Any]]:
        return [params for name, params in self.calls if name == operation]


@dataclass
class Recorder:
    """Stands in for the run registry: what the adapter recorded, in order."""

    resources: list[CreatedResource] = field(default_factory=list)

    def __call__(self, resource: CreatedResource) -> None:
        self.resources.append(resource)


class FakeCluster:
    """A HyperPod cluster with one CPU group and one GPU group, answering the SageMaker cluster operations.

    ``arrive()`` lets the requested nodes come up (or not, with ``capacity=False``), the way continuous
    provisioning does: the cluster returns to ``InService`` either way.
    """

    def __init__(self, aws: FakeAws, *, name: str = "mtrl-hp", group: str = "gpu", restricted: bool = False) -> None:
        self.name, self.group, self.restricted = name, group, restricted
        self.status = "InService"
        self.group_status = "InService"
        self.target = 0
        self.current = 0
        self.node_status = "Running"
        self.events: list[dict[str, Any]] = []
        self.updates: list[dict[str, Any]] = []
        self.on_update: Callable[[dict[str, Any]], None] = lambda _params: None
        for operation, handler in {
            "DescribeCluster": self._describe,
            "UpdateCluster": self._update,
            "ListClusterNodes": self._nodes,
            "ListClusterEvents": self._events,
        }.items():
            aws.on("sagemaker", operation, handler)

    @property
    def arn(self) -> str:
        return f"arn:aws:sagemaker:us-east-1:123456789012:cluster/{self.name}"

    def arrive(self, *, capacity: bool = True) -> None:
        self.current = self.target if capacity else 0
        self.status = self.group_status = "InService"

    def _gpu_group(self) -> dict[str, Any]:
        role = "arn:aws:iam::123456789012:role/mtrl-hyperpod-nodes"
        common: dict[str, Any] = {
            "CurrentCount": self.current,
            "TargetCount": self.target,
            "InstanceGroupName": self.group,
            "InstanceType": "ml.p5.48xlarge",
            "ExecutionRole": role,
            "ThreadsPerCore": 1,
            "InstanceStorageConfigs": [{"EbsVolumeConfig": {"VolumeSizeInGB": 500}}],
            "Status": self.group_status,
            "OverrideVpcConfig": {"SecurityGroupIds": ["sg-0123"], "Subnets": ["subnet-0123"]},
        }
        if self.restricted:
            common["EnvironmentConfig"] = {
                "FSxLustreConfig": {"SizeInGiB": 1200, "PerUnitStorageThroughput": 250},
                "S3OutputPath": "s3://reported-only/",
            }
            return common
        return {
            **common,
            "MinCount": 0,
            "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/scripts/", "OnCreate": "on_create.sh"},
            "OnStartDeepHealthChecks": ["InstanceStress"],
            "CurrentImageId": "ami-0aaa",
            "DesiredImageId": "ami-0aaa",
            "KubernetesConfig": {
                "CurrentLabels": {"mtrl/role": "gpu"},
                "DesiredLabels": {"mtrl/role": "gpu"},
                "DesiredTaints": [{"Key": "nvidia.com/gpu", "Value": "true", "Effect": "NoSchedule"}],
            },
        }

    def _describe(self, params: dict[str, Any]) -> dict[str, Any]:
        if params["ClusterName"] != self.name:
            raise FakeError("ResourceNotFound", f"Cluster {params['ClusterName']} not found")
        cpu = {
            "CurrentCount": 1,
            "TargetCount": 1,
            "InstanceGroupName": "system",
            "InstanceType": "ml.m5.xlarge",
            "ExecutionRole": "arn:aws:iam::123456789012:role/mtrl-hyperpod-nodes",
            "Status": "InService",
        }
        groups = (
            {"InstanceGroups": [cpu], "RestrictedInstanceGroups": [self._gpu_group()]}
            if self.restricted
            else {"InstanceGroups": [cpu, self._gpu_group()]}
        )
        return {
            "ClusterArn": self.arn,
            "ClusterName": self.name,
            "ClusterStatus": self.status,
            "NodeProvisioningMode": "Continuous",
            **groups,
        }

    def _update(self, params: dict[str, Any]) -> dict[str, Any]:
        self.updates.append(params)
        self.on_update(params)
        if self.status != "InService":
            raise FakeError("ConflictException", f"Cluster {self.name} is {self.status}")
        (spec,) = params["RestrictedInstanceGroups" if self.restricted else "InstanceGroups"]
        self.target = spec["InstanceCount"]
        self.status = self.group_status = "Updating"
        self.current = min(self.current, self.target)  # scale-down is immediate enough for these tests
        return {"ClusterArn": self.arn}

    def _nodes(self, params: dict[str, Any]) -> dict[str, Any]:
        now = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
        nodes = [
            {
                "InstanceGroupName": "system",
                "InstanceId": "i-system",
                "InstanceType": "ml.m5.xlarge",
                "LaunchTime": now,
                "InstanceStatus": {"Status": "Running"},
            }
        ]
        nodes += [
            {
                "InstanceGroupName": self.group,
                "InstanceId": f"i-gpu{index}",
                "InstanceType": "ml.p5.48xlarge",
                "LaunchTime": now,
                "InstanceStatus": {"Status": self.node_status, "Message": "InsufficientInstanceCapacity"}
                if self.node_status == "Failure"
                else {"Status": self.node_status},
            }
            for index in range(self.current)
        ]
        wanted = params.get("InstanceGroupNameContains", "")
        return {"ClusterNodeSummaries": [n for n in nodes if wanted in n["InstanceGroupName"]]}

    def _events(self, _params: dict[str, Any]) -> dict[str, Any]:
        return {"Events": self.events}


def ingest_emf(cloudwatch: Any, text: str, *, at: datetime) -> int:
    """CloudWatch's extraction of EMF log lines, which moto cannot run: one data point per metric a line declares,
    with the line's dimensions, at ``at``. Returns how many data points were put."""
    points = 0
    for line in text.splitlines():
        document = json.loads(line)
        for directive in document["_aws"]["CloudWatchMetrics"]:
            for names in directive["Dimensions"]:
                dimensions = [{"Name": name, "Value": str(document[name])} for name in names]
                data = [
                    {
                        "MetricName": metric["Name"],
                        "Dimensions": dimensions,
                        "Value": float(document[metric["Name"]]),
                        "Timestamp": at,
                    }
                    for metric in directive["Metrics"]
                    if document.get(metric["Name"]) is not None
                ]
                if data:
                    cloudwatch.put_metric_data(Namespace=directive["Namespace"], MetricData=data)
                    points += len(data)
    return points
