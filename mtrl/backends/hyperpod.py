"""The ``hyperpod`` backend: Amazon Nova Forge multi-turn RFT on the HyperPod cluster, reward workers on ECS.

Per run it holds three things, each recorded on the run before it is created and removed by ``cleanup``:

1. **GPU capacity** — the configured instance group scaled from its idle count to the run's count with SageMaker
   ``UpdateCluster`` (the full group spec read from ``DescribeCluster``; only the count changes). Ready means the
   target count of nodes is ``Running`` in ``ListClusterNodes``: an ``InService`` cluster with no GPU nodes is not
   ready. Capacity/quota failures are read from ``ListClusterEvents`` and node status messages.
2. **Nova Forge per-run infrastructure and the job** — the Nova Forge SDK needs Python ≥ 3.12 and the HyperPod
   CLI, so it runs in a container task (``mtrl.backends.nova_runner``) started with ECS ``RunTask`` and a command
   (``setup``/``submit``/``status``/``cancel``/``teardown``). The adapter writes the run's spec to
   ``runs/<run-id>/backend/spec.json`` and reads each command's result from ``runs/<run-id>/backend/<cmd>.json``.
   ``setup`` deploys one CloudFormation stack per run, ``<prefix>-run-<run>-NovaForgeSDK``, deleted in cleanup.
3. **Reward workers** — ``worker_count`` Fargate tasks of the reward-worker task definition, started with the
   run's environment id/args and the per-run queue endpoints, found again by their ``startedBy`` token.

``provision`` is a reconcile step: each call advances what it can and raises ``ProvisioningInProgress`` (a
transient ``BackendError``) until everything is ready, so the pipeline retries it with back-off; capacity that
never arrives is bounded by ``hyperpod_capacity_timeout_minutes``. GPU groups are not shared between concurrent
runs: give each training slot its own instance group (``hyperpod_gpu_instance_group``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Literal

from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mtrl.backends._aws import AwsClients, S3Uri, backend_error, error_code, error_message, safe_name, short_token
from mtrl.backends.base import BackendError, CreatedResource, Finding, JobState, JobStatus, RunContext
from mtrl.cost import CostError, cost_for_run
from mtrl.cost.calculator import load_price_book
from mtrl.worker.contract import worker_environment

CAPACITY_KIND = "hyperpod-capacity"
TASKS_KIND = "ecs-tasks"
STACK_KIND = "cloudformation-stack"
TASK_DEFINITIONS_KIND = "ecs-task-definitions"
SDK_STACK_SUFFIX = "NovaForgeSDK"  # appended by the SDK to the stack name it is given

RunnerCommand = Literal["setup", "submit", "status", "cancel", "teardown"]

_BUSY_CLUSTER = {"Creating", "Updating", "SystemUpdating", "RollingBack"}
_BUSY_GROUP = {"Creating", "Updating", "SystemUpdating"}
_CAPACITY_PATTERN = re.compile(
    r"insufficient\s*(instance)?\s*capacity|InsufficientInstanceCapacity|ResourceLimitExceeded|"
    r"service limit|quota|capacity (is )?not available|unable to (launch|provision)",
    re.IGNORECASE,
)


class ProvisioningInProgress(BackendError):
    """Not ready yet (nodes arriving, stack deploying, update running elsewhere): call ``provision`` again."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=True)


class HyperPodSettings(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    region: str = Field(min_length=1)
    prefix: str = Field("mtrl", pattern=r"^[a-z][a-z0-9-]{1,18}[a-z0-9]$")
    hyperpod_cluster_name: str = Field(min_length=1)
    hyperpod_gpu_instance_group: str = Field(min_length=1)
    hyperpod_idle_instance_count: int = Field(0, ge=0)
    # The group's run_count setting: the most instances one run may scale it to (None: no ceiling known).
    hyperpod_max_instance_count: int | None = Field(None, ge=1)
    instance_count: int = Field(ge=1, le=64)
    hyperpod_capacity_timeout_minutes: int = Field(60, ge=1)
    hyperpod_namespace: str = "kubeflow"
    ecs_cluster_arn: str = Field(min_length=1)
    task_subnet_ids: list[str] = Field(min_length=1)
    task_security_group_ids: list[str] = Field(min_length=1)
    reward_task_definition: str = Field(min_length=1)
    reward_container_name: str = "worker"
    worker_count: int = Field(1, ge=1, le=256)
    environment: str = Field(min_length=1)
    environment_args: dict[str, Any] = {}
    nova_runner_task_definition: str = Field(min_length=1)
    nova_runner_container_name: str = "runner"
    nova_rft_role_name: str = Field(min_length=1)
    nova_custom_env_s3_uri: str | None = None  # packaged custom environment; None = a Nova Forge built-in env id
    nova_model: str = "NOVA_LITE_2"
    nova_training_method: Literal["RFT_MULTITURN_LORA", "RFT_MULTITURN_FULL"] = "RFT_MULTITURN_LORA"
    hyperparameters: dict[str, str | int | float | bool] = {}
    mlflow_tracking_arn: str | None = None
    hyperpod_status_refresh_seconds: int = Field(60, ge=10)
    # How long one provision/submit/cancel/cleanup call may wait in-process before handing back a transient
    # "still in progress" (sized for the 15-minute backend Lambda, which the pipeline retries).
    hyperpod_wait_seconds: int = Field(600, ge=0, le=840)


def parse_settings(settings: Mapping[str, Any]) -> HyperPodSettings:
    try:
        return HyperPodSettings.model_validate(dict(settings))
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in error.errors())
        raise BackendError(f"hyperpod settings are invalid: {problems}") from error


def sdk_stack_name(settings: HyperPodSettings, run_id: str) -> str:
    """The name given to the SDK (it appends ``-NovaForgeSDK``); inside ``<prefix>-run-*`` for the runner's IAM."""
    return safe_name(run_id, max_length=80, prefix=f"{settings.prefix}-run-")


def cloudformation_stack_name(settings: HyperPodSettings, run_id: str) -> str:
    return f"{sdk_stack_name(settings, run_id)}-{SDK_STACK_SUFFIX}"


def _now_iso(clock: Callable[[], float]) -> str:
    return datetime.fromtimestamp(clock(), UTC).isoformat()


# ---------------------------------------------------------------------------------------------------------------
# GPU capacity (SageMaker HyperPod)


def find_group(cluster: Mapping[str, Any], group: str) -> tuple[str, Mapping[str, Any]]:
    """(``InstanceGroups`` | ``RestrictedInstanceGroups``, the group's details)."""
    for key in ("InstanceGroups", "RestrictedInstanceGroups"):
        for details in cluster.get(key) or []:
            if details.get("InstanceGroupName") == group:
                return key, details
    names = [
        g.get("InstanceGroupName") for k in ("InstanceGroups", "RestrictedInstanceGroups") for g in cluster.get(k) or []
    ]
    raise BackendError(f"HyperPod cluster {cluster.get('ClusterName')} has no instance group '{group}' (has: {names})")


def group_spec(service_model: Any, key: str, details: Mapping[str, Any], count: int) -> dict[str, Any]:
    """The UpdateCluster specification equal to the group's current configuration, with ``InstanceCount`` changed.

    Fields are taken from ``DescribeCluster`` as the service model's specification shape names them; where the
    details report current and desired values (``DesiredImageId``, ``DesiredLabels``…), the desired one is kept.
    """
    shape_name = (
        "ClusterInstanceGroupSpecification"
        if key == "InstanceGroups"
        else ("ClusterRestrictedInstanceGroupSpecification")
    )
    spec: dict[str, Any] = _project(details, service_model.shape_for(shape_name))
    if key == "InstanceGroups" and details.get("MinCount") is not None:
        spec["MinInstanceCount"] = min(int(details["MinCount"]), count)
    spec["InstanceCount"] = count
    return spec


def _project(value: Any, shape: Any) -> Any:
    if shape.type_name == "structure" and isinstance(value, Mapping):
        projected: dict[str, Any] = {}
        for name, member in shape.members.items():
            source = value.get(name, value.get(f"Desired{name}"))
            if source is not None:
                projected[name] = _project(source, member)
        return projected
    if shape.type_name == "list" and isinstance(value, list):
        return [_project(item, shape.member) for item in value]
    return value


class GpuCapacity:
    """Scale one instance group of a HyperPod cluster and tell when its nodes are there."""

    def __init__(self, sagemaker: Any, settings: HyperPodSettings) -> None:
        self._sm = sagemaker
        self._settings = settings

    @property
    def cluster_name(self) -> str:
        return self._settings.hyperpod_cluster_name

    @property
    def group(self) -> str:
        return self._settings.hyperpod_gpu_instance_group

    def describe(self) -> dict[str, Any]:
        try:
            return dict(self._sm.describe_cluster(ClusterName=self.cluster_name))
        except ClientError as error:
            raise backend_error(f"DescribeCluster {self.cluster_name}", error) from error

    def busy(self, cluster: Mapping[str, Any]) -> str | None:
        """Why an UpdateCluster now would fight another update (None when it would not)."""
        if cluster["ClusterStatus"] in _BUSY_CLUSTER:
            return f"cluster {self.cluster_name} is {cluster['ClusterStatus']}"
        _, details = find_group(cluster, self.group)
        if details.get("Status") in _BUSY_GROUP:
            return f"instance group {self.group} is {details['Status']}"
        return None

    def scale(self, count: int) -> bool:
        """Set the group's target count; False when it already is. Waits (transient) rather than fight an update."""
        cluster = self.describe()
        if cluster["ClusterStatus"] in {"Failed", "Deleting"}:
            raise BackendError(
                f"HyperPod cluster {self.cluster_name} is {cluster['ClusterStatus']}: "
                f"{cluster.get('FailureMessage', 'no failure message')}"
            )
        key, details = find_group(cluster, self.group)
        if details.get("TargetCount") == count:
            return False
        reason = self.busy(cluster)
        if reason:
            raise ProvisioningInProgress(f"waiting to scale {self.group} to {count}: {reason}")
        spec = group_spec(self._sm.meta.service_model, key, details, count)
        try:
            self._sm.update_cluster(ClusterName=self.cluster_name, **{key: [spec]})
        except ClientError as error:
            if error_code(error) in {"ConflictException", "ResourceInUse"}:
                raise ProvisioningInProgress(
                    f"waiting to scale {self.group}: another update is running ({error_message(error)})"
                ) from error
            raise backend_error(f"UpdateCluster {self.cluster_name} ({self.group} → {count})", error) from error
        return True

    def running(self) -> tuple[int, list[str]]:
        """Nodes of the group in ``Running``, and the status messages of nodes that failed."""
        running, failures = 0, []
        paginator = self._sm.get_paginator("list_cluster_nodes")
        try:
            for page in paginator.paginate(ClusterName=self.cluster_name, InstanceGroupNameContains=self.group):
                for node in page["ClusterNodeSummaries"]:
                    if node["InstanceGroupName"] != self.group:
                        continue
                    status = node["InstanceStatus"]
                    if status["Status"] == "Running":
                        running += 1
                    elif status["Status"] == "Failure":
                        failures.append(f"{node['InstanceId']}: {status.get('Message', 'failed')}")
        except ClientError as error:
            raise backend_error(f"ListClusterNodes {self.cluster_name}", error) from error
        return running, failures

    def capacity_problems(self, since: datetime) -> list[str]:
        """Cluster events since the scale-up that say capacity or quota is missing."""
        try:
            events = self._sm.list_cluster_events(
                ClusterName=self.cluster_name,
                InstanceGroupName=self.group,
                EventTimeAfter=since,
                SortBy="EventTime",
                SortOrder="Descending",
                MaxResults=50,
            ).get("Events", [])
        except ClientError as error:
            if error_code(error) in {"AccessDeniedException", "ValidationException"}:
                return []  # events are a diagnosis aid; the timeout still bounds the wait
            raise backend_error(f"ListClusterEvents {self.cluster_name}", error) from error
        return [
            str(event.get("Description", ""))
            for event in events
            if _CAPACITY_PATTERN.search(str(event.get("Description", "")))
        ]


# ---------------------------------------------------------------------------------------------------------------
# The adapter


class HyperPodAdapter:
    name = "hyperpod"

    def __init__(
        self,
        clients: AwsClients | None = None,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        wait_seconds: float | None = None,
        poll_seconds: float = 20.0,
    ) -> None:
        self._clients = clients or AwsClients()
        self._clock = clock
        self._sleep = sleep
        self._wait_override = wait_seconds  # None: the run's hyperpod_wait_seconds
        self._poll_seconds = poll_seconds

    # -- helpers ---------------------------------------------------------------------------------------------

    def _deadline(self, settings: HyperPodSettings) -> float:
        wait = settings.hyperpod_wait_seconds if self._wait_override is None else self._wait_override
        return self._clock() + wait

    def _sm(self, settings: HyperPodSettings) -> Any:
        return self._clients.client("sagemaker", settings.region)

    def _ecs(self, settings: HyperPodSettings) -> Any:
        return self._clients.client("ecs", settings.region)

    def _s3(self, settings: HyperPodSettings) -> Any:
        return self._clients.client("s3", settings.region)

    def _cfn(self, settings: HyperPodSettings) -> Any:
        return self._clients.client("cloudformation", settings.region)

    @staticmethod
    def _backend_prefix(run: RunContext) -> S3Uri:
        return S3Uri.parse(run.output_uri).join("backend")

    @staticmethod
    def _token(run: RunContext, role: str) -> str:
        """ECS ``startedBy`` (≤ 36 chars) naming this run's tasks of one role."""
        return f"mtrl-{short_token(run.run_id, 16)}-{role}"[:36]

    @staticmethod
    def _held(run: RunContext, kind: str, identifier: str | None = None) -> CreatedResource | None:
        return next(
            (r for r in run.resources if r.kind == kind and (identifier is None or r.identifier == identifier)), None
        )

    def _record(self, run: RunContext, local: list[CreatedResource], resource: CreatedResource) -> CreatedResource:
        existing = self._held(run, resource.kind, resource.identifier) or next(
            (r for r in local if r.kind == resource.kind and r.identifier == resource.identifier), None
        )
        if existing is not None:
            return existing
        run.record_resource(resource)
        local.append(resource)
        return resource

    # -- preflight -------------------------------------------------------------------------------------------

    def preflight(self, run: RunContext) -> list[Finding]:
        try:
            settings = parse_settings(run.settings)
        except BackendError as error:
            return [Finding("settings", False, str(error))]
        findings = [Finding("settings", True, "hyperpod settings are complete")]
        gpu = GpuCapacity(self._sm(settings), settings)
        try:
            cluster = gpu.describe()
            _, details = find_group(cluster, gpu.group)
        except BackendError as error:
            return [*findings, Finding("cluster", False, str(error))]
        if cluster["ClusterStatus"] in {"Failed", "Deleting"}:
            findings.append(Finding("cluster", False, f"cluster {gpu.cluster_name} is {cluster['ClusterStatus']}"))
        else:
            findings.append(Finding("cluster", True, f"cluster {gpu.cluster_name} is {cluster['ClusterStatus']}"))
        findings.append(self._check_task_definitions(settings))
        idle = settings.hyperpod_idle_instance_count
        target = details.get("TargetCount", 0)
        findings.append(
            Finding(
                "gpu-group",
                target == idle,
                f"{gpu.group} ({details.get('InstanceType')}) is at its idle count {idle}"
                if target == idle
                else f"{gpu.group} targets {target} instances, not its idle count {idle}: another run holds it "
                "(one training slot per GPU instance group)",
            )
        )
        ceiling = settings.hyperpod_max_instance_count
        if ceiling is not None and settings.instance_count > ceiling:
            findings.append(
                Finding(
                    "instance-count",
                    False,
                    f"instance_count {settings.instance_count} is above the run_count {ceiling} configured for "
                    f"{gpu.group}; ask for at most {ceiling} or raise the group's run_count and redeploy",
                )
            )
        findings.append(_budget_check(run, str(details.get("InstanceType")), settings.region))
        return findings

    def _check_task_definitions(self, settings: HyperPodSettings) -> Finding:
        ecs = self._ecs(settings)
        for label, definition, container in (
            ("reward worker", settings.reward_task_definition, settings.reward_container_name),
            ("Nova Forge runner", settings.nova_runner_task_definition, settings.nova_runner_container_name),
        ):
            try:
                described = ecs.describe_task_definition(taskDefinition=definition)["taskDefinition"]
            except ClientError as error:
                return Finding(
                    "task-definitions", False, f"{label} task definition {definition}: {error_message(error)}"
                )
            names = [c["name"] for c in described.get("containerDefinitions", [])]
            if container not in names:
                return Finding(
                    "task-definitions",
                    False,
                    f"{label} task definition {definition} has no container '{container}' ({names})",
                )
        return Finding("task-definitions", True, "reward-worker and runner task definitions exist")

    # -- provision -------------------------------------------------------------------------------------------

    def provision(self, run: RunContext) -> list[CreatedResource]:
        """Advance GPU scale-up, per-run Nova infra and reward workers; ``ProvisioningInProgress`` until ready."""
        settings = parse_settings(run.settings)
        deadline = self._deadline(settings)
        while True:
            try:
                return self._provision_step(run, settings)
            except ProvisioningInProgress:
                if self._clock() + self._poll_seconds > deadline:
                    raise
                self._sleep(self._poll_seconds)

    def _provision_step(self, run: RunContext, settings: HyperPodSettings) -> list[CreatedResource]:
        local: list[CreatedResource] = []
        waiting: list[str] = []
        capacity = self._ensure_capacity(run, settings, local, waiting)
        outputs = self._ensure_nova_infra(run, settings, local, waiting)
        if outputs is not None:
            self._ensure_workers(run, settings, outputs, local, waiting)
        if waiting:
            raise ProvisioningInProgress(f"run {run.run_id}: " + "; ".join(waiting))
        held = [*run.resources, *local]
        return [r for r in held if r.kind in {CAPACITY_KIND, TASKS_KIND, STACK_KIND, TASK_DEFINITIONS_KIND}] or [
            capacity
        ]

    def _ensure_capacity(
        self, run: RunContext, settings: HyperPodSettings, local: list[CreatedResource], waiting: list[str]
    ) -> CreatedResource:
        gpu = GpuCapacity(self._sm(settings), settings)
        identifier = f"{gpu.cluster_name}/{gpu.group}"
        cluster = gpu.describe()
        _, details = find_group(cluster, gpu.group)
        target = max(settings.instance_count, settings.hyperpod_idle_instance_count)
        resource = self._record(
            run,
            local,
            CreatedResource(
                CAPACITY_KIND,
                identifier,
                {
                    "cluster": gpu.cluster_name,
                    "group": gpu.group,
                    "instance_type": details.get("InstanceType", ""),
                    "idle_count": settings.hyperpod_idle_instance_count,
                    "target_count": target,
                    "requested_at": _now_iso(self._clock),
                },
            ),
        )
        gpu.scale(target)
        requested_at = datetime.fromisoformat(str(resource.details["requested_at"]))
        running, failures = gpu.running()
        current = find_group(gpu.describe(), gpu.group)[1]
        if running >= target and current.get("CurrentCount", 0) >= target:
            return resource
        problems = gpu.capacity_problems(requested_at) + [f for f in failures if _CAPACITY_PATTERN.search(f)]
        what = f"{target} × {resource.details.get('instance_type') or 'GPU'} in {gpu.group}"
        if problems:
            raise BackendError(
                f"run {run.run_id}: GPU capacity for {what} is not available: {problems[0]} — request a quota "
                "increase (SageMaker HyperPod instance quota), use a training plan, or retry later"
            )
        waited = self._clock() - requested_at.timestamp()
        if waited > settings.hyperpod_capacity_timeout_minutes * 60:
            detail = f"; failed nodes: {'; '.join(failures)}" if failures else ""
            raise BackendError(
                f"run {run.run_id}: GPU capacity for {what} did not arrive within "
                f"{settings.hyperpod_capacity_timeout_minutes} minutes ({running}/{target} nodes Running{detail})"
            )
        waiting.append(f"GPU nodes {running}/{target} Running in {gpu.group}")
        return resource

    # -- Nova Forge runner -----------------------------------------------------------------------------------

    def _write_spec(self, run: RunContext, settings: HyperPodSettings) -> S3Uri:
        spec_uri = self._backend_prefix(run).join("spec.json")
        spec = {
            "run_id": run.run_id,
            "region": settings.region,
            "stack_name": sdk_stack_name(settings, run.run_id),
            "rft_role_name": settings.nova_rft_role_name,
            "ecs_cluster_arn": settings.ecs_cluster_arn,
            "vpc_config": {
                "subnets": settings.task_subnet_ids,
                "security_groups": settings.task_security_group_ids,
            },
            "environment": settings.environment,
            "environment_args": settings.environment_args,
            "custom_env_s3_uri": settings.nova_custom_env_s3_uri,
            "hyperpod_cluster_name": settings.hyperpod_cluster_name,
            "namespace": settings.hyperpod_namespace,
            "instance_type": "",  # filled from the capacity record below
            "instance_count": settings.instance_count,
            "model": settings.nova_model,
            "training_method": settings.nova_training_method,
            "overrides": settings.hyperparameters,
            "dataset_uri": run.dataset_uri,
            "eval_dataset_uri": run.eval_dataset_uri,
            "output_uri": str(S3Uri.parse(run.output_uri).join("model/")),
            "mlflow_tracking_arn": settings.mlflow_tracking_arn,
            "result_prefix": str(self._backend_prefix(run)),
        }
        capacity = self._held(run, CAPACITY_KIND)
        if capacity is not None:
            spec["instance_type"] = capacity.details.get("instance_type", "")
        try:
            self._s3(settings).put_object(
                Bucket=spec_uri.bucket, Key=spec_uri.key, Body=json.dumps(spec, indent=2).encode()
            )
        except ClientError as error:
            raise backend_error(f"run {run.run_id}: writing {spec_uri}", error) from error
        return spec_uri

    def read_result(self, run: RunContext, settings: HyperPodSettings, command: RunnerCommand) -> dict[str, Any] | None:
        uri = self._backend_prefix(run).join(f"{command}.json")
        try:
            body = self._s3(settings).get_object(Bucket=uri.bucket, Key=uri.key)["Body"].read()
        except ClientError as error:
            if error_code(error) in {"NoSuchKey", "404"}:
                return None
            raise backend_error(f"run {run.run_id}: reading {uri}", error) from error
        try:
            result = json.loads(body)
        except json.JSONDecodeError as error:
            raise BackendError(f"run {run.run_id}: runner result {uri} is not JSON") from error
        return result if isinstance(result, dict) else None

    def _tasks(self, settings: HyperPodSettings, started_by: str, status: str = "RUNNING") -> list[str]:
        ecs = self._ecs(settings)
        arns: list[str] = []
        try:
            for page in ecs.get_paginator("list_tasks").paginate(
                cluster=settings.ecs_cluster_arn, startedBy=started_by, desiredStatus=status
            ):
                arns.extend(page["taskArns"])
        except ClientError as error:
            raise backend_error(f"ListTasks {started_by}", error) from error
        return arns

    def _run_tasks(
        self,
        run: RunContext,
        settings: HyperPodSettings,
        *,
        task_definition: str,
        container: str,
        started_by: str,
        count: int,
        environment: Mapping[str, str],
        command: list[str] | None = None,
    ) -> None:
        ecs = self._ecs(settings)
        override: dict[str, Any] = {
            "name": container,
            "environment": [{"name": k, "value": v} for k, v in sorted(environment.items())],
        }
        if command is not None:
            override["command"] = command
        remaining = count
        while remaining > 0:
            batch = min(remaining, 10)  # RunTask starts at most 10 tasks per call
            try:
                response = ecs.run_task(
                    cluster=settings.ecs_cluster_arn,
                    taskDefinition=task_definition,
                    launchType="FARGATE",
                    count=batch,
                    startedBy=started_by,
                    networkConfiguration={
                        "awsvpcConfiguration": {
                            "subnets": settings.task_subnet_ids,
                            "securityGroups": settings.task_security_group_ids,
                            "assignPublicIp": "DISABLED",
                        }
                    },
                    overrides={"containerOverrides": [override]},
                    tags=[{"key": "mtrl:run-id", "value": run.run_id[:256]}],
                )
            except ClientError as error:
                raise backend_error(f"run {run.run_id}: RunTask {task_definition}", error) from error
            if response.get("failures"):
                reasons = "; ".join(f"{f.get('arn', '')} {f.get('reason', '')}".strip() for f in response["failures"])
                raise BackendError(f"run {run.run_id}: RunTask {task_definition} failed: {reasons}", transient=True)
            remaining -= batch

    def run_runner(
        self,
        run: RunContext,
        settings: HyperPodSettings,
        command: RunnerCommand,
        local: list[CreatedResource] | None = None,
    ) -> None:
        """Start the Nova Forge runner task for ``command`` (once; a running one is not started again)."""
        started_by = self._token(run, command)
        self._record(
            run,
            local if local is not None else [],
            CreatedResource(TASKS_KIND, f"{settings.ecs_cluster_arn}|{started_by}", {"role": f"nova-runner-{command}"}),
        )
        if self._tasks(settings, started_by):
            return
        spec_uri = self._write_spec(run, settings)
        self._run_tasks(
            run,
            settings,
            task_definition=settings.nova_runner_task_definition,
            container=settings.nova_runner_container_name,
            started_by=started_by,
            count=1,
            environment={"MTRL_RUN_ID": run.run_id, "AWS_REGION": settings.region},
            command=[command, "--spec", str(spec_uri)],
        )

    def _runner_outcome(
        self, run: RunContext, settings: HyperPodSettings, command: RunnerCommand
    ) -> dict[str, Any] | None:
        """The command's result (raises on a reported failure, or on a runner that stopped without one)."""
        result = self.read_result(run, settings, command)
        if result is not None:
            if not result.get("ok"):
                raise BackendError(f"run {run.run_id}: Nova Forge {command} failed: {result.get('error', 'no detail')}")
            return dict(result.get("result") or {})
        if not self._tasks(settings, self._token(run, command)) and self._tasks(
            settings, self._token(run, command), status="STOPPED"
        ):
            raise BackendError(
                f"run {run.run_id}: the Nova Forge runner ({command}) stopped without writing a result: "
                f"{self._stopped_reason(settings, self._token(run, command))}"
            )
        return None

    def _stopped_reason(self, settings: HyperPodSettings, started_by: str) -> str:
        arns = self._tasks(settings, started_by, status="STOPPED")[:1]
        if not arns:
            return "unknown"
        task = self._ecs(settings).describe_tasks(cluster=settings.ecs_cluster_arn, tasks=arns)["tasks"][0]
        exits = [f"exit {c.get('exitCode')}" for c in task.get("containers", []) if c.get("exitCode") is not None]
        return ", ".join([str(task.get("stoppedReason", "stopped")), *exits])

    def _ensure_nova_infra(
        self, run: RunContext, settings: HyperPodSettings, local: list[CreatedResource], waiting: list[str]
    ) -> dict[str, Any] | None:
        stack = cloudformation_stack_name(settings, run.run_id)
        self._record(
            run, local, CreatedResource(STACK_KIND, stack, {"sdk_stack_name": sdk_stack_name(settings, run.run_id)})
        )
        # The SDK registers task definitions for its SAM deploy task under the stack's name.
        self._record(run, local, CreatedResource(TASK_DEFINITIONS_KIND, sdk_stack_name(settings, run.run_id)))
        outputs = self._runner_outcome(run, settings, "setup")
        if outputs is None:
            self.run_runner(run, settings, "setup", local)
            waiting.append(f"Nova Forge per-run stack {stack} is being set up")
        return outputs

    def _ensure_workers(
        self,
        run: RunContext,
        settings: HyperPodSettings,
        outputs: Mapping[str, Any],
        local: list[CreatedResource],
        waiting: list[str],
    ) -> None:
        started_by = self._token(run, "workers")
        self._record(
            run,
            local,
            CreatedResource(TASKS_KIND, f"{settings.ecs_cluster_arn}|{started_by}", {"role": "reward-workers"}),
        )
        queue = outputs.get("rollout_request_queue_url")
        results = outputs.get("rollout_response_sqs_url")
        proxy = outputs.get("proxy_function_url")
        if not queue or not results or not proxy:
            raise BackendError(f"run {run.run_id}: Nova Forge setup returned no queue/proxy endpoints: {dict(outputs)}")
        running = self._tasks(settings, started_by)
        missing = settings.worker_count - len(running)
        if missing > 0:
            self._run_tasks(
                run,
                settings,
                task_definition=settings.reward_task_definition,
                container=settings.reward_container_name,
                started_by=started_by,
                count=missing,
                environment={
                    **worker_environment(
                        run_id=run.run_id,
                        env_id=settings.environment,
                        env_args=settings.environment_args,
                        request_queue_url=str(queue),
                        result_queue_url=str(results),
                        policy_url=str(proxy),
                    ),
                    "AWS_REGION": settings.region,
                },
            )
            running = self._tasks(settings, started_by)
        described = (
            self._ecs(settings).describe_tasks(cluster=settings.ecs_cluster_arn, tasks=running)["tasks"]
            if running
            else []
        )
        up = sum(1 for task in described if task.get("lastStatus") == "RUNNING")
        if up < settings.worker_count:
            waiting.append(f"reward workers {up}/{settings.worker_count} running")

    # -- submit / status / cancel ----------------------------------------------------------------------------

    def submit(self, run: RunContext) -> str:
        """Start the runner's ``submit`` once; returns the HyperPod job name when the runner reports it."""
        settings = parse_settings(run.settings)
        deadline = self._deadline(settings)
        while True:
            result = self._runner_outcome(run, settings, "submit")
            if result is not None:
                if not result.get("job_name"):
                    raise BackendError(f"run {run.run_id}: Nova Forge submit reported no job name: {result}")
                return str(result["job_name"])
            self.run_runner(run, settings, "submit")
            if self._clock() + self._poll_seconds > deadline:
                raise BackendError(f"run {run.run_id}: Nova Forge job submission in progress", transient=True)
            self._sleep(self._poll_seconds)

    def status(self, run: RunContext, job_id: str) -> JobStatus:
        """The last status the runner reported; starts a fresh ``status`` task when that report is stale."""
        settings = parse_settings(run.settings)
        result = self.read_result(run, settings, "status")
        report = dict(result.get("result") or {}) if result else {}
        if result is not None and not result.get("ok"):
            report = {"state": "UNKNOWN", "message": str(result.get("error", ""))}
        fresh = result is not None and self._clock() - float(result.get("finished_at_epoch", 0)) < (
            settings.hyperpod_status_refresh_seconds
        )
        state = _sdk_state(str(report.get("state", "")))
        if not state.terminal and not fresh:
            self.run_runner(run, settings, "status")
        if report.get("job_name") not in {None, job_id}:
            return JobStatus(JobState.PENDING, f"waiting for the first status report of {job_id}")
        if not report:
            return JobStatus(JobState.PENDING, f"waiting for the first status report of {job_id}")
        metrics = {k: float(v) for k, v in (report.get("metrics") or {}).items() if isinstance(v, int | float)}
        cost = self._cost_so_far(run, settings)
        if cost is not None:
            metrics["cost_usd"] = cost  # the pipeline's budget guard reads it
        return JobStatus(
            state=state,
            message=str(report.get("message") or report.get("state", "")),
            progress={k: v for k, v in report.items() if k in {"step", "total_steps", "started_at"}},
            metrics=metrics,
            outputs={k: str(v) for k, v in (report.get("outputs") or {}).items()},
        )

    def _cost_so_far(self, run: RunContext, settings: HyperPodSettings) -> float | None:
        """GPU instance-hours held since the scale-up request, priced from prices.json (None when unpriced)."""
        capacity = self._held(run, CAPACITY_KIND)
        if capacity is None or not capacity.details.get("instance_type"):
            return None
        held = replace(capacity, details={**capacity.details, "released_at": _now_iso(self._clock)})
        try:
            return float(
                cost_for_run({"backend": "hyperpod", "region": settings.region, "gpu_holds": gpu_holds([held])}).total
            )
        except CostError:
            return None

    def cancel(self, run: RunContext, job_id: str) -> None:
        """Cancel the HyperPod job through the runner; waits for its confirmation (a job left pending on the
        cluster would grab the GPUs of the next run), transient while the runner is still working."""
        settings = parse_settings(run.settings)
        deadline = self._deadline(settings)
        while self._runner_outcome(run, settings, "cancel") is None:
            self.run_runner(run, settings, "cancel")
            if self._clock() + self._poll_seconds > deadline:
                raise BackendError(f"run {run.run_id}: cancelling HyperPod job {job_id} in progress", transient=True)
            self._sleep(self._poll_seconds)

    # -- cleanup ---------------------------------------------------------------------------------------------

    def cleanup(self, run: RunContext) -> list[CreatedResource]:
        """Stop workers and runner tasks, delete the per-run stack and task definitions, scale the GPU group back.

        Every step is attempted even when an earlier one fails, so one stuck resource never keeps GPUs held.
        """
        settings = parse_settings(run.settings)
        removed: list[CreatedResource] = []
        problems: list[BackendError] = []
        steps: list[tuple[str, Callable[[CreatedResource], bool]]] = [
            (TASKS_KIND, lambda r: self._stop_tasks(settings, r)),
            (STACK_KIND, lambda r: self._delete_stack(settings, r)),
            (TASK_DEFINITIONS_KIND, lambda r: self._deregister_task_definitions(settings, r)),
            (CAPACITY_KIND, lambda r: self._release_capacity(settings, r)),
        ]
        for kind, step in steps:
            for resource in [r for r in run.resources if r.kind == kind]:
                try:
                    if step(resource):
                        removed.append(
                            replace(resource, details={**resource.details, "released_at": _now_iso(self._clock)})
                            if kind == CAPACITY_KIND
                            else resource
                        )
                except BackendError as error:
                    problems.append(error)
        if problems:
            raise BackendError(
                f"run {run.run_id}: cleanup incomplete: " + "; ".join(str(p) for p in problems),
                transient=all(p.transient for p in problems),
            )
        return removed

    def _stop_tasks(self, settings: HyperPodSettings, resource: CreatedResource) -> bool:
        cluster, started_by = resource.identifier.split("|", 1)
        ecs = self._ecs(settings)
        for arn in self._tasks(settings.model_copy(update={"ecs_cluster_arn": cluster}), started_by):
            try:
                ecs.stop_task(cluster=cluster, task=arn, reason="mtrl run teardown")
            except ClientError as error:
                raise backend_error(f"StopTask {arn}", error) from error
        return True

    def _delete_stack(self, settings: HyperPodSettings, resource: CreatedResource) -> bool:
        cfn = self._cfn(settings)
        name = resource.identifier
        status = _stack_status(cfn, name)
        if status is None or status == "DELETE_COMPLETE":
            return True
        if status == "DELETE_IN_PROGRESS":
            return self._wait_stack_deleted(cfn, name)
        try:
            cfn.delete_stack(StackName=name)
        except ClientError as error:
            raise backend_error(f"DeleteStack {name}", error) from error
        return self._wait_stack_deleted(cfn, name)

    def _wait_stack_deleted(self, cfn: Any, name: str) -> bool:
        deadline = self._clock() + (self._wait_override if self._wait_override is not None else 300)
        while True:
            status = _stack_status(cfn, name)
            if status is None or status == "DELETE_COMPLETE":
                return True
            if status == "DELETE_FAILED":
                raise BackendError(f"stack {name} failed to delete: {_stack_failure(cfn, name)}")
            if self._clock() + self._poll_seconds > deadline:
                raise BackendError(f"stack {name} is still deleting ({status})", transient=True)
            self._sleep(self._poll_seconds)

    def _deregister_task_definitions(self, settings: HyperPodSettings, resource: CreatedResource) -> bool:
        ecs = self._ecs(settings)
        try:
            for page in ecs.get_paginator("list_task_definitions").paginate(
                familyPrefix=resource.identifier, status="ACTIVE"
            ):
                for arn in page["taskDefinitionArns"]:
                    ecs.deregister_task_definition(taskDefinition=arn)
        except ClientError as error:
            raise backend_error(f"deregistering task definitions {resource.identifier}*", error) from error
        return True

    def _release_capacity(self, settings: HyperPodSettings, resource: CreatedResource) -> bool:
        idle = int(resource.details.get("idle_count", settings.hyperpod_idle_instance_count))
        gpu = GpuCapacity(
            self._sm(settings),
            settings.model_copy(
                update={
                    "hyperpod_cluster_name": resource.details.get("cluster", settings.hyperpod_cluster_name),
                    "hyperpod_gpu_instance_group": resource.details.get("group", settings.hyperpod_gpu_instance_group),
                }
            ),
        )
        try:
            gpu.scale(idle)
        except ProvisioningInProgress as error:
            raise BackendError(f"GPU group not yet released: {error}", transient=True) from error
        return True


def _sdk_state(state: str) -> JobState:
    """The SDK's job status (``InProgress``/``Completed``/``Failed``, aliases ``Created``/``Running``/…)."""
    normalized = state.strip().lower()
    if normalized in {"completed", "succeeded", "complete"}:
        return JobState.SUCCEEDED
    if normalized in {"failed", "error"}:
        return JobState.FAILED
    if normalized in {"stopped", "cancelled", "canceled"}:
        return JobState.STOPPED
    if normalized in {"inprogress", "in_progress", "running"}:
        return JobState.RUNNING
    return JobState.PENDING


def _stack_status(cfn: Any, name: str) -> str | None:
    try:
        stacks = cfn.describe_stacks(StackName=name)["Stacks"]
    except ClientError as error:
        if "does not exist" in error_message(error):
            return None
        raise backend_error(f"DescribeStacks {name}", error) from error
    return str(stacks[0]["StackStatus"]) if stacks else None


def _stack_failure(cfn: Any, name: str) -> str:
    try:
        events = cfn.describe_stack_events(StackName=name)["StackEvents"]
    except ClientError:
        return "no events"
    reasons = [
        f"{e.get('LogicalResourceId')}: {e.get('ResourceStatusReason')}"
        for e in events
        if e.get("ResourceStatus") == "DELETE_FAILED" and e.get("ResourceStatusReason")
    ]
    return "; ".join(reasons[:3]) or "no reason reported"


def gpu_holds(resources: Iterable[CreatedResource | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """GPU holds for ``mtrl.cost.cost_for_run``: held from the scale-up request until release.

    Accepts what ``cleanup`` returned (``details.released_at``) or a run record's resource entries
    (``{"kind", "identifier", "details", "removed_at"}`` as the run registry stores them).
    """
    holds = []
    for resource in resources:
        kind: Any
        details: Mapping[str, Any]
        removed_at: Any
        if isinstance(resource, CreatedResource):
            kind, details, removed_at = resource.kind, resource.details, None
        else:
            kind, details, removed_at = resource.get("kind"), resource.get("details") or {}, resource.get("removed_at")
        end = details.get("released_at") or removed_at
        if kind != CAPACITY_KIND or not end or not details.get("instance_type"):
            continue
        holds.append(
            {
                "instance_type": details["instance_type"],
                "count": details["target_count"],
                "start": details["requested_at"],
                "end": str(end).replace("Z", "+00:00"),
            }
        )
    return holds


def _budget_check(run: RunContext, instance_type: str, region: str) -> Finding:
    """A run with ``max_budget_usd`` needs a price for its GPU instances, or the budget could never be enforced."""
    budget = run.settings.get("max_budget_usd")
    try:
        price = load_price_book().instance_price(instance_type, region)
    except CostError as error:
        if budget is None:
            return Finding("budget", True, f"no budget set; cost will not be reported: {error}")
        return Finding(
            "budget",
            False,
            f"max_budget_usd {budget} cannot be enforced: {error}; add the price to mtrl/cost/prices.json "
            "or drop the budget from the manifest",
        )
    return Finding("budget", True, f"{instance_type} priced at {price.hourly} USD/instance-hour in {region}")
