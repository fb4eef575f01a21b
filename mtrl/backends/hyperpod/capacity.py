"""GPU capacity: scale one HyperPod instance group with ``UpdateCluster`` and tell when its nodes are there."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from botocore.exceptions import ClientError

from mtrl.backends._aws import backend_error, error_code, error_message
from mtrl.backends.hyperpod.common import CAPACITY_KIND, ProvisioningInProgress, now_iso
from mtrl.contracts.backend import BackendError, CreatedResource, RunContext

_BUSY_CLUSTER = {"Creating", "Updating", "SystemUpdating", "RollingBack"}
_BUSY_GROUP = {"Creating", "Updating", "SystemUpdating"}
_CAPACITY_PATTERN = re.compile(
    r"insufficient\s*(instance)?\s*capacity|InsufficientInstanceCapacity|ResourceLimitExceeded|"
    r"service limit|quota|capacity (is )?not available|unable to (launch|provision)",
    re.IGNORECASE,
)


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


def nova_forge_group_problem(cluster: Mapping[str, Any], group: str) -> str | None:
    """Why the Nova Forge SDK would refuse a job on ``group`` once it is scaled (None when it would not).

    The SDK's own infrastructure check (``amzn_nova_forge.validation.validator``, ``_validate_infrastructure``)
    looks only at the cluster's ``RestrictedInstanceGroups``: one of them must have the job's instance type, with
    ``CurrentCount`` at least the job's instance count. The job's instance type is the type of the group the run
    scales, so that group must itself be a restricted instance group; the count is then the run's own scale-up
    (bounded by the group's run_count, the preflight's ``instance-count`` check).
    """
    key, details = find_group(cluster, group)
    if key == "RestrictedInstanceGroups":
        return None
    restricted = [
        f"{g.get('InstanceGroupName')} ({g.get('InstanceType')})" for g in cluster.get("RestrictedInstanceGroups") or []
    ]
    return (
        f"Nova Forge trains only on a restricted instance group, and '{group}' ({details.get('InstanceType')}) is a "
        f"normal instance group of cluster {cluster.get('ClusterName')}; the SDK would refuse the job after the GPUs "
        f"were scaled (\"Instance type '{details.get('InstanceType')}' not available in restricted instance groups\"; "
        f"restricted groups: {', '.join(restricted) or 'none'}). Configure hyperpod_restricted_instance_group "
        "(docs/cluster.md) and redeploy, or run this environment on another backend"
    )


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


class CapacityTarget(Protocol):
    """The instance group a backend scales per run (HyperPodSettings is one; the verl backend names its own)."""

    @property
    def hyperpod_cluster_name(self) -> str: ...

    @property
    def hyperpod_gpu_instance_group(self) -> str: ...


@dataclass(frozen=True)
class GroupTarget:
    hyperpod_cluster_name: str
    hyperpod_gpu_instance_group: str


class GpuCapacity:
    """Scale one instance group of a HyperPod cluster and tell when its nodes are there."""

    def __init__(self, sagemaker: Any, settings: CapacityTarget) -> None:
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


def hold_capacity(
    gpu: GpuCapacity,
    run: RunContext,
    *,
    record: Callable[[CreatedResource], CreatedResource],
    instance_count: int,
    idle_count: int,
    timeout_minutes: int,
    clock: Callable[[], float],
) -> tuple[CreatedResource, str | None]:
    """Record, then scale the run's group to its count: (the capacity resource, what is still awaited or None).

    Raises BackendError when the cluster reports missing capacity or quota, or after ``timeout_minutes``.
    """
    identifier = f"{gpu.cluster_name}/{gpu.group}"
    _, details = find_group(gpu.describe(), gpu.group)
    target = max(instance_count, idle_count)
    resource = record(
        CreatedResource(
            CAPACITY_KIND,
            identifier,
            {
                "cluster": gpu.cluster_name,
                "group": gpu.group,
                "instance_type": details.get("InstanceType", ""),
                "idle_count": idle_count,
                "target_count": target,
                "requested_at": now_iso(clock),
            },
        )
    )
    gpu.scale(target)
    requested_at = datetime.fromisoformat(str(resource.details["requested_at"]))
    running, failures = gpu.running()
    current = find_group(gpu.describe(), gpu.group)[1]
    if running >= target and current.get("CurrentCount", 0) >= target:
        return resource, None
    problems = gpu.capacity_problems(requested_at) + [f for f in failures if _CAPACITY_PATTERN.search(f)]
    what = f"{target} × {resource.details.get('instance_type') or 'GPU'} in {gpu.group}"
    if problems:
        raise BackendError(
            f"run {run.run_id}: GPU capacity for {what} is not available: {problems[0]} — request a quota "
            "increase (SageMaker HyperPod instance quota), use a training plan, or retry later"
        )
    waited = clock() - requested_at.timestamp()
    if waited > timeout_minutes * 60:
        detail = f"; failed nodes: {'; '.join(failures)}" if failures else ""
        raise BackendError(
            f"run {run.run_id}: GPU capacity for {what} did not arrive within "
            f"{timeout_minutes} minutes ({running}/{target} nodes Running{detail})"
        )
    return resource, f"GPU nodes {running}/{target} Running in {gpu.group}"


def release_capacity(sagemaker: Any, resource: CreatedResource, *, fallback: CapacityTarget, idle_count: int) -> bool:
    """Scale the group a capacity resource holds back to its idle count (transient while an update runs)."""
    idle = int(resource.details.get("idle_count", idle_count))
    target = GroupTarget(
        str(resource.details.get("cluster", fallback.hyperpod_cluster_name)),
        str(resource.details.get("group", fallback.hyperpod_gpu_instance_group)),
    )
    try:
        GpuCapacity(sagemaker, target).scale(idle)
    except ProvisioningInProgress as error:
        raise BackendError(f"GPU group not yet released: {error}", transient=True) from error
    return True


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


# -- what the GPU safety net (mtrl.runs.capacity_guard) asks of a HyperPod cluster -------------------------------
@dataclass(frozen=True)
class GroupSize:
    """An instance group's size as ``DescribeCluster`` reports it."""

    target: int
    instance_type: str


def describe_cluster(sagemaker: Any, cluster: str) -> dict[str, Any]:
    """The cluster's ``DescribeCluster`` document (a transient ``BackendError`` where the call fails)."""
    return GpuCapacity(sagemaker, GroupTarget(cluster, "")).describe()


def group_size(cluster: Mapping[str, Any], group: str) -> GroupSize:
    """The target count of ``group`` in a ``DescribeCluster`` document (BackendError: the cluster has no such group)."""
    _, details = find_group(cluster, group)
    target = int(details.get("TargetCount", details.get("CurrentCount", 0)) or 0)
    return GroupSize(target=target, instance_type=str(details.get("InstanceType", "")))


def scale_group(sagemaker: Any, cluster: str, group: str, count: int) -> None:
    """Set the group's target count (``ProvisioningInProgress`` while the cluster or the group is updating)."""
    GpuCapacity(sagemaker, GroupTarget(cluster, group)).scale(count)


def held_group(resource: Mapping[str, Any], cluster: str) -> str | None:
    """The instance group of ``cluster`` a run record's resource entry holds (None: not GPU capacity, or removed)."""
    details = resource.get("details") or {}
    if resource.get("kind") != CAPACITY_KIND or resource.get("removed_at"):
        return None
    if details.get("cluster", cluster) != cluster or not details.get("group"):
        return None
    return str(details["group"])
