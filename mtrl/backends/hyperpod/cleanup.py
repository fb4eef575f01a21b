"""Cleanup of a hyperpod run: every recorded resource removed, each step attempted even when another fails."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from botocore.exceptions import ClientError

from mtrl.backends._aws import backend_error, error_code, error_message
from mtrl.backends.hyperpod.capacity import release_capacity
from mtrl.backends.hyperpod.common import (
    CAPACITY_KIND,
    STACK_KIND,
    TASK_DEFINITIONS_KIND,
    TASKS_KIND,
    WORKER_ROLE_KIND,
    HyperPodSettings,
    now_iso,
    parse_settings,
)
from mtrl.backends.hyperpod.naming import sdk_log_group_name
from mtrl.backends.hyperpod.worker_role import WorkerRole
from mtrl.contracts.backend import BackendError, CreatedResource, RunContext


class Cleanup(WorkerRole):
    """Remove what a run recorded: tasks, the per-run stack, task definitions, the worker role, GPU capacity."""

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
            (WORKER_ROLE_KIND, lambda r: self._delete_worker_role(settings, r)),  # after its tasks are stopped
            (CAPACITY_KIND, lambda r: self._release_capacity(settings, r)),
        ]
        for kind, step in steps:
            for resource in [r for r in run.resources if r.kind == kind]:
                try:
                    if step(resource):
                        removed.append(
                            replace(resource, details={**resource.details, "released_at": now_iso(self._clock)})
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
        if status not in {None, "DELETE_COMPLETE"}:
            if status != "DELETE_IN_PROGRESS":
                try:
                    cfn.delete_stack(StackName=name)
                except ClientError as error:
                    raise backend_error(f"DeleteStack {name}", error) from error
            self._wait_stack_deleted(cfn, name)
        self._delete_sdk_log_group(settings, name)
        return True

    def _delete_sdk_log_group(self, settings: HyperPodSettings, stack_name: str) -> None:
        """The SDK's setup() creates ``/ecs/<stack name>`` for its starter-kit task outside the stack (no retention,
        never deleted by the SDK): the run removes it with the stack."""
        group = sdk_log_group_name(stack_name)
        try:
            self._logs(settings).delete_log_group(logGroupName=group)
        except ClientError as error:
            if error_code(error) != "ResourceNotFoundException":
                raise backend_error(f"DeleteLogGroup {group}", error) from error

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
        return release_capacity(
            self._sm(settings), resource, fallback=settings, idle_count=settings.hyperpod_idle_instance_count
        )


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
