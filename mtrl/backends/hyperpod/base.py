"""The hyperpod adapter's shared state and helpers (clients, deadlines, run records, ECS task start/list)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import ClientError

from mtrl.backends._aws import AwsClients, S3Uri, backend_error, short_token
from mtrl.backends.hyperpod.common import HyperPodSettings
from mtrl.contracts.backend import BackendError, CreatedResource, RunContext


class AdapterBase:
    """Clients, clock and the run-record and ECS helpers every part of the hyperpod adapter uses."""

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

    def _logs(self, settings: HyperPodSettings) -> Any:
        return self._clients.client("logs", settings.region)

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
        task_role_arn: str | None = None,
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
                    overrides={
                        "containerOverrides": [override],
                        **({"taskRoleArn": task_role_arn} if task_role_arn else {}),
                    },
                    tags=[{"key": "mtrl:run-id", "value": run.run_id[:256]}],
                )
            except ClientError as error:
                raise backend_error(f"run {run.run_id}: RunTask {task_definition}", error) from error
            if response.get("failures"):
                reasons = "; ".join(f"{f.get('arn', '')} {f.get('reason', '')}".strip() for f in response["failures"])
                raise BackendError(f"run {run.run_id}: RunTask {task_definition} failed: {reasons}", transient=True)
            remaining -= batch
