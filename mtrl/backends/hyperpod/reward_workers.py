"""Reward workers for a hyperpod run: Fargate tasks reading the per-run rollout queue."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mtrl.backends.hyperpod.base import AdapterBase
from mtrl.backends.hyperpod.common import TASKS_KIND, HyperPodSettings
from mtrl.contracts.backend import BackendError, CreatedResource, RunContext
from mtrl.worker.contract import worker_environment


class RewardWorkers(AdapterBase):
    """``worker_count`` Fargate tasks of the reward-worker task definition, found again by their ``startedBy`` token."""

    def _ensure_workers(
        self,
        run: RunContext,
        settings: HyperPodSettings,
        outputs: Mapping[str, Any],
        local: list[CreatedResource],
        waiting: list[str],
        *,
        task_role_arn: str,
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
                task_role_arn=task_role_arn,  # the run's own role: its queues and proxy only (worker_role.py)
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
