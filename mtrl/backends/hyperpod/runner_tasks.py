"""Nova Forge per-run infrastructure and job, through the runner container started with ECS ``RunTask``."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from mtrl.backends._aws import S3Uri, backend_error, error_code
from mtrl.backends.hyperpod.base import AdapterBase
from mtrl.backends.hyperpod.common import (
    CAPACITY_KIND,
    STACK_KIND,
    TASK_DEFINITIONS_KIND,
    TASKS_KIND,
    HyperPodSettings,
    RunnerCommand,
)
from mtrl.backends.hyperpod.naming import SDK_STACK_SUFFIX, sdk_stack_name
from mtrl.contracts.backend import BackendError, CreatedResource, RunContext


class RunnerTasks(AdapterBase):
    """The Nova Forge runner (``nova_runner``) as ECS tasks: spec out, one task per command, result in."""

    def stack_base(self, run: RunContext, settings: HyperPodSettings) -> str:
        """The SDK stack name of the run: the one recorded on the run when there is one (a naming change between
        releases must never orphan a running run's stack), else ``naming.sdk_stack_name``."""
        held = self._held(run, STACK_KIND)
        recorded = held.details.get("sdk_stack_name") if held is not None else None
        return str(recorded) if recorded else sdk_stack_name(settings, run.run_id)

    def _write_spec(self, run: RunContext, settings: HyperPodSettings) -> S3Uri:
        spec_uri = self._backend_prefix(run).join("spec.json")
        spec = {
            "run_id": run.run_id,
            "region": settings.region,
            "stack_name": self.stack_base(run, settings),
            "rft_role_name": settings.nova_rft_role_name,
            "ecs_cluster_arn": settings.ecs_cluster_arn,
            "vpc_config": {
                "subnets": settings.task_subnet_ids,
                "security_groups": settings.task_security_group_ids,
            },
            "environment": settings.environment,
            "environment_args": settings.environment_args,
            "custom_env_s3_uri": settings.package_uri(run.run_id),
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
            "nova_forge_telemetry": settings.nova_forge_telemetry,
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
        base = self.stack_base(run, settings)
        self._record(run, local, CreatedResource(STACK_KIND, f"{base}-{SDK_STACK_SUFFIX}", {"sdk_stack_name": base}))
        # The SDK registers task definitions for its SAM deploy task under the stack's name.
        self._record(run, local, CreatedResource(TASK_DEFINITIONS_KIND, base))
        outputs = self._runner_outcome(run, settings, "setup")
        if outputs is None:
            self.run_runner(run, settings, "setup", local)
            waiting.append(f"Nova Forge per-run stack {base}-{SDK_STACK_SUFFIX} is being set up")
        return outputs
