"""The ``sessions`` backend's adapter: mtrl's GRPO loop (``runner``) on a training service, driven by the pipeline.

- **Preflight**: the per-run options, the environment, where the loop can run (a SageMaker session only from a
  Fargate task: it takes minutes to start, which a poll cannot hold; the local service needs torch where it runs),
  and a budget only where the run can be priced (SageMaker training-session prices are unsourced: ``cost``).
- **Provision**: nothing. A sessions run holds nothing at rest; its service is opened by the loop.
- **Submit** writes the run config and the initial progress under ``runs/<run id>/sessions/``; with a task
  configured (``SessionsSettings.runs_in_a_task``) it starts the loop's Fargate task (ECS RunTask,
  ``python -m mtrl.backends.sessions.task --run-config s3://…``), recorded as a ``CreatedResource`` (kind
  ``sessions-task``, its ``startedBy`` token) before it starts.
- **Status** reports the progress. In a task: a task that stopped before the run finished is started again
  (resuming from the last saved step), up to ``MAX_TASK_ATTEMPTS`` tasks. Without one: each poll runs
  ``steps_per_poll`` steps itself, resuming from the state saved after the last.
- **Cancel** asks the loop to stop (``cancel.json``, read before each step) and stops the task (ECS sends SIGTERM:
  the task closes its service). **Cleanup** stops any task of the run still running and stops and deletes any
  SageMaker session a killed task left (their names are in the progress before they are created).
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError

from mtrl.backends._aws import AwsClients, backend_error, error_code, short_token
from mtrl.backends.sessions import cost
from mtrl.backends.sessions.options import run_options
from mtrl.backends.sessions.runner import (
    PROGRESS,
    RUN_CONFIG,
    OpenService,
    Progress,
    RunConfig,
    RunStore,
    SessionsRunner,
    open_service,
    session_config,
)
from mtrl.backends.sessions.settings import SessionsSettings
from mtrl.contracts.backend import BackendError, CreatedResource, Finding, JobState, JobStatus, RunContext
from mtrl.cost.calculator import CostError, load_price_book
from mtrl.envs.registry import EnvironmentNotFoundError, InvalidEnvironmentError, load_spec

TASK_KIND = "sessions-task"
LAUNCH = "launch.json"
MAX_TASK_ATTEMPTS = 3
DEFAULT_STEPS_PER_POLL = 1
STEPS_PER_POLL_ENV = "MTRL_SESSIONS_STEPS_PER_POLL"
TASK_MODULE = "mtrl.backends.sessions.task"
# Session statuses in which a session no longer bills for compute (stopped, ended or being deleted).
_NOT_RUNNING = frozenset({"Stopped", "Failed", "Expired", "Deleting", "DeletionFailed"})
_STATES = {"done": JobState.SUCCEEDED, "failed": JobState.FAILED, "stopped": JobState.STOPPED}


def run_config(run: RunContext) -> RunConfig:
    """The run's config from its effective settings (raises ``ValidationError``)."""
    settings = run.settings
    return RunConfig(
        run_id=run.run_id,
        output_uri=run.output_uri,
        dataset_uri=run.dataset_uri,
        dataset_version_id=settings.get("dataset_version_id"),
        eval_dataset_uri=run.eval_dataset_uri,
        environment=str(settings.get("environment") or ""),
        environment_args=dict(settings.get("environment_args") or {}),
        options=run_options(settings),
        deploy=SessionsSettings.model_validate(dict(settings)),
    )


class SessionsAdapter:
    """``BackendAdapter`` for ``sessions`` (see the module docstring). ``open``: how the loop builds its service."""

    name = "sessions"

    def __init__(
        self,
        *,
        clients: AwsClients | None = None,
        steps_per_poll: int | None = None,
        open: OpenService = open_service,
    ) -> None:
        self.clients = clients or AwsClients()
        configured = os.environ.get(STEPS_PER_POLL_ENV)
        self.steps_per_poll = steps_per_poll or (int(configured) if configured else DEFAULT_STEPS_PER_POLL)
        self._open = open

    def _client(self, service: str, config: RunConfig) -> Any:
        return self.clients.client(service, config.deploy.region)

    def _config(self, run: RunContext) -> RunConfig:
        try:
            return run_config(run)
        except ValidationError as error:
            raise BackendError(f"run {run.run_id}: sessions settings: {error}") from error

    # -- preflight, provision, submit ----------------------------------------------------------------------------

    def preflight(self, run: RunContext) -> list[Finding]:
        try:
            config = run_config(run)
        except ValidationError as error:
            return [Finding("sessions-settings", False, str(error))]
        options, deploy = config.options, config.deploy
        findings = [
            Finding(
                "sessions-settings", True, f"{options.steps} steps on the {options.service} service ({options.model})"
            )
        ]
        try:
            load_spec(config.environment)
            findings.append(Finding("environment", True, f"environment '{config.environment}' loads"))
        except (EnvironmentNotFoundError, InvalidEnvironmentError) as error:
            findings.append(Finding("environment", False, str(error)))
        findings.append(_where_the_loop_runs(options.service, deploy))
        return findings  # a budget is checked by Preflight itself (mtrl.backends.pricing.budget_finding)

    def provision(self, run: RunContext) -> list[CreatedResource]:
        return []  # nothing at rest: the loop opens its training service itself

    def submit(self, run: RunContext) -> str:
        config = self._config(run)
        store = self._store(config)
        try:
            store.write(config.folder.join(RUN_CONFIG), config.model_dump_json().encode())
            runner = SessionsRunner(config, store.s3, open=self._open)
            if store.progress() is None:
                store.save_progress(runner.progress())
                store.write_signals(runner.progress(), config.options.group_size)
        except (ClientError, BotoCoreError) as error:
            raise backend_error(f"run {run.run_id}: writing the sessions run config", error) from error
        if config.deploy.runs_in_a_task:
            self._launch(run, config, attempt=1)
        return f"sessions-{run.run_id}"

    # -- status --------------------------------------------------------------------------------------------------

    def status(self, run: RunContext, job_id: str) -> JobStatus:
        config = self._config(run)
        store = self._store(config)
        try:
            progress = _read_progress(store, run)
            if progress.finished:
                return self._report(config, progress)
            if config.deploy.runs_in_a_task:
                return self._task_status(run, config, store, progress)
            progress = SessionsRunner(config, store.s3, open=self._open).advance(self.steps_per_poll)
        except (ClientError, BotoCoreError) as error:
            raise backend_error(f"run {run.run_id}: reading or writing the sessions progress", error) from error
        return self._report(config, progress)

    def _task_status(self, run: RunContext, config: RunConfig, store: RunStore, progress: Progress) -> JobStatus:
        launch = self._launch_record(store)
        task = self._describe_task(config, launch.get("task_arn"))
        if task is not None and task.get("lastStatus") != "STOPPED":
            state = JobState.RUNNING if task.get("lastStatus") == "RUNNING" else JobState.PENDING
            return self._report(config, progress, state=state)
        progress = _read_progress(store, run)  # the task may have finished between the two reads
        if progress.finished:
            return self._report(config, progress)
        if store.cancel_requested():  # stopped on request: never started again
            return self._report(config, progress.model_copy(update={"phase": "stopped", "message": "cancelled"}))
        reason = (task or {}).get("stoppedReason") or "the task is gone"
        attempts = int(launch.get("attempt", 1))
        if attempts >= MAX_TASK_ATTEMPTS:
            message = f"the loop's task stopped {attempts} times before the run finished (last: {reason})"
            return self._report(config, progress.model_copy(update={"phase": "failed", "message": message}))
        self._launch(run, config, attempt=attempts + 1)
        restarted = progress.model_copy(update={"message": f"task restarted after step {progress.step}: {reason}"})
        return self._report(config, restarted, state=JobState.PENDING)

    def _report(self, config: RunConfig, progress: Progress, *, state: JobState | None = None) -> JobStatus:
        job_state = state or _STATES.get(progress.phase, JobState.RUNNING)
        metrics: dict[str, float] = {}
        if progress.last.get("reward_mean") is not None:
            metrics["reward_mean"] = float(progress.last["reward_mean"])
        metrics.update(_heldout(progress))
        try:
            priced = cost.estimate({"service": progress.service, "token_usage": progress.usage}, load_price_book())
            metrics["cost_usd"] = float(priced.total)
        except CostError:
            pass  # unsourced prices (SageMaker): the record keeps the token counts, `mtrl cost` says why
        outputs = {"progress_uri": str(config.folder.join(PROGRESS))} if job_state is JobState.SUCCEEDED else {}
        return JobStatus(
            state=job_state,
            message=progress.message or f"step {progress.step}/{progress.total_steps}",
            progress={
                "step": progress.step,
                "total_steps": progress.total_steps,
                "phase": progress.phase,
                "service": progress.service,
                "token_usage": dict(progress.usage),
                "sampler_kl": progress.last.get("sampler_kl"),
                "infra_failed": progress.infra_failed,
            },
            metrics=metrics,
            outputs=outputs,
        )

    def evaluate(self, run: RunContext) -> dict[str, float]:
        """The held-out evaluation before and after training (both played by the loop through its driver)."""
        config = self._config(run)
        progress = _read_progress(self._store(config), run)
        if progress.phase != "done":
            raise BackendError(f"run {run.run_id}: training has not finished", transient=progress.phase == "training")
        if progress.after is None or progress.before is None:
            raise BackendError(f"run {run.run_id}: the sessions run had no held-out rows to evaluate")
        return {"heldout_tasks": float(progress.after["tasks"]), **_heldout(progress)}

    # -- cancel, cleanup -----------------------------------------------------------------------------------------

    def cancel(self, run: RunContext, job_id: str) -> None:
        config = self._config(run)
        try:
            self._store(config).request_cancel()
        except (ClientError, BotoCoreError) as error:
            raise backend_error(f"run {run.run_id}: asking the sessions loop to stop", error) from error
        self._stop_tasks(run, config)

    def cleanup(self, run: RunContext) -> list[CreatedResource]:
        config = self._config(run)
        removed = self._stop_tasks(run, config)
        progress = self._store(config).progress()
        if progress is not None and progress.service == "sagemaker":
            for name in progress.sessions:
                self._release_session(config, name)
        return removed

    # -- the loop's task -----------------------------------------------------------------------------------------

    def _launch(self, run: RunContext, config: RunConfig, *, attempt: int) -> None:
        deploy = config.deploy
        started_by = f"mtrl-{short_token(run.run_id, 16)}-{attempt}"
        run.record_resource(
            CreatedResource(TASK_KIND, started_by, {"cluster": deploy.sessions_ecs_cluster_arn, "attempt": attempt})
        )
        try:
            response = self._client("ecs", config).run_task(
                cluster=deploy.sessions_ecs_cluster_arn,
                taskDefinition=deploy.sessions_task_definition,
                launchType="FARGATE",
                count=1,
                startedBy=started_by,
                networkConfiguration={
                    "awsvpcConfiguration": {
                        "subnets": list(deploy.sessions_subnet_ids),
                        "securityGroups": list(deploy.sessions_security_group_ids),
                        "assignPublicIp": "ENABLED" if deploy.sessions_assign_public_ip else "DISABLED",
                    }
                },
                overrides={
                    "containerOverrides": [
                        {
                            "name": deploy.sessions_container_name,
                            "command": ["python", "-m", TASK_MODULE, "--run-config", config.uri],
                        }
                    ]
                },
            )
        except (ClientError, BotoCoreError) as error:
            raise backend_error(f"run {run.run_id}: starting the sessions task", error) from error
        if response.get("failures") or not response.get("tasks"):
            raise BackendError(f"run {run.run_id}: RunTask failed: {response.get('failures')}", transient=True)
        record = {"attempt": attempt, "started_by": started_by, "task_arn": response["tasks"][0]["taskArn"]}
        store = self._store(config)
        store.write(config.folder.join(LAUNCH), json.dumps(record).encode())

    def _launch_record(self, store: RunStore) -> dict[str, Any]:
        body = store.read(store.folder.join(LAUNCH))
        return {} if body is None else dict(json.loads(body))

    def _describe_task(self, config: RunConfig, task_arn: str | None) -> Mapping[str, Any] | None:
        if not task_arn:
            return None
        found = self._client("ecs", config).describe_tasks(
            cluster=config.deploy.sessions_ecs_cluster_arn, tasks=[task_arn]
        )
        tasks = found.get("tasks") or []
        return tasks[0] if tasks else None

    def _stop_tasks(self, run: RunContext, config: RunConfig) -> list[CreatedResource]:
        """Stop every task of the run still running (by each recorded ``startedBy``); returns their resources."""
        recorded = [resource for resource in run.resources if resource.kind == TASK_KIND]
        if not recorded:
            return []
        ecs = self._client("ecs", config)
        try:
            for resource in recorded:
                cluster = resource.details.get("cluster") or config.deploy.sessions_ecs_cluster_arn
                listed = ecs.list_tasks(cluster=cluster, startedBy=resource.identifier, desiredStatus="RUNNING")
                for task_arn in listed.get("taskArns", []):
                    ecs.stop_task(cluster=cluster, task=task_arn, reason=f"mtrl: run {run.run_id} ended")
        except (ClientError, BotoCoreError) as error:
            raise backend_error(f"run {run.run_id}: stopping the sessions task", error) from error
        return recorded

    def _release_session(self, config: RunConfig, name: str) -> None:
        """Stop and delete a session the loop may have left (a task killed before it could); transient until the
        session no longer runs."""
        from mtrl.backends.sessions.sagemaker_service import Pacing, SageMakerTrainingService  # noqa: PLC0415
        from mtrl.backends.sessions.service import ServiceError  # noqa: PLC0415

        control = self._client("sagemaker", config)
        pacing = Pacing(session_poll_s=5.0, teardown_timeout_s=30.0)
        session = SageMakerTrainingService(
            session_config(config, name), control=control, runtime=None, tokenizer_factory=_no_tokenizer, pacing=pacing
        )
        try:
            session.close()
            status = control.describe_training_session(TrainingSessionName=name)["TrainingSessionDetail"][
                "TrainingSessionStatus"
            ]
        except ServiceError as error:
            raise BackendError(f"training session {name}: {error}", transient=True) from error
        except ClientError as error:
            if error_code(error) in {"ResourceNotFound", "ResourceNotFoundException"}:
                return
            raise backend_error(f"training session {name}: describing it", error) from error
        if status not in _NOT_RUNNING:
            raise BackendError(f"training session {name} is still {status}", transient=True)

    def _store(self, config: RunConfig) -> RunStore:
        return RunStore(self._client("s3", config), config.output_uri)


def _where_the_loop_runs(service: str, deploy: SessionsSettings) -> Finding:
    if service == "sagemaker":
        if not deploy.runs_in_a_task:
            return Finding(
                "sessions-service",
                False,
                "a SageMaker training session runs only from the loop's Fargate task, and this deployment has none "
                "(sessions_ecs_cluster_arn, sessions_task_definition, sessions_container_name)",
            )
        if not (deploy.sessions_role_arn and deploy.sessions_model_package_group_arn):
            return Finding(
                "sessions-service",
                False,
                "the deployment names no session role or model package group "
                "(sessions_role_arn, sessions_model_package_group_arn)",
            )
        return Finding("sessions-service", True, "SageMaker training sessions, driven from a Fargate task per run")
    if deploy.runs_in_a_task:
        return Finding("sessions-service", True, "the local service, in the loop's Fargate task")
    missing = [name for name in ("torch", "peft", "transformers") if importlib.util.find_spec(name) is None]
    if missing:
        return Finding(
            "sessions-service",
            False,
            f"the local service runs in the status polls here, and this runtime lacks {', '.join(missing)} "
            "(the mtrl[llm] extra)",
        )
    return Finding("sessions-service", True, "the local service, a few steps per status poll")


def _read_progress(store: RunStore, run: RunContext) -> Progress:
    progress = store.progress()
    if progress is None:
        raise BackendError(f"run {run.run_id}: no sessions progress (the run was never submitted)")
    return progress


def _heldout(progress: Progress) -> dict[str, float]:
    figures: dict[str, float] = {}
    names = {"reward_mean": "reward", "success_share": "success", "evaluation_mean": "evaluation"}
    for when, evaluation in (("before", progress.before), ("after", progress.after)):
        for field, name in names.items():
            value = (evaluation or {}).get(field)
            if value is not None:
                figures[f"heldout_{name}_{when}"] = float(value)
    return figures


def _no_tokenizer() -> Any:
    raise RuntimeError("tearing a session down needs no tokenizer")
