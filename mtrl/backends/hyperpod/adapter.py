"""The ``hyperpod`` adapter: preflight, provision (capacity, Nova Forge infra, workers), submit, status, cancel."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from botocore.exceptions import BotoCoreError, ClientError

from mtrl.backends._aws import error_message
from mtrl.backends.episode_rows import update_signals
from mtrl.backends.hyperpod.capacity import (
    GpuCapacity,
    find_group,
    gpu_holds,
    hold_capacity,
    nova_forge_group_problem,
)
from mtrl.backends.hyperpod.cleanup import Cleanup
from mtrl.backends.hyperpod.common import (
    CAPACITY_KIND,
    STACK_KIND,
    TASK_DEFINITIONS_KIND,
    TASKS_KIND,
    WORKER_ROLE_KIND,
    HyperPodSettings,
    ProvisioningInProgress,
    now_iso,
    parse_settings,
)
from mtrl.backends.hyperpod.cost import estimate
from mtrl.backends.hyperpod.reward_workers import RewardWorkers
from mtrl.backends.hyperpod.runner_tasks import RunnerTasks
from mtrl.backends.hyperpod.signals import estimated_progress
from mtrl.contracts.backend import BackendError, CreatedResource, Finding, JobState, JobStatus, RunContext
from mtrl.cost import CostError, load_price_book
from mtrl.health.signals import SignalsError
from mtrl.worker.contract import RUN_DIMENSION as WORKER_RUN_DIMENSION


class HyperPodAdapter(RunnerTasks, RewardWorkers, Cleanup):
    name = "hyperpod"

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
        restricted = nova_forge_group_problem(cluster, gpu.group)
        findings.append(
            Finding(
                "restricted-group",
                restricted is None,
                restricted or f"{gpu.group} ({details.get('InstanceType')}) is a restricted instance group",
            )
        )
        findings.append(self._check_task_definitions(settings))
        try:
            findings.append(Finding("environment-package", True, settings.package_uri(run.run_id)))
        except BackendError as error:
            findings.append(Finding("environment-package", False, str(error)))
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
        return findings  # a budget is checked by Preflight itself (mtrl.backends.pricing.budget_finding)

    def gpu_instance_type(self, run: RunContext) -> str:
        """The instance type of the run's GPU group, as the cluster describes it (what its hours are priced at)."""
        settings = parse_settings(run.settings)
        gpu = GpuCapacity(self._sm(settings), settings)
        _, details = find_group(gpu.describe(), gpu.group)
        return str(details.get("InstanceType"))

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
        settings.package_uri(run.run_id)  # an environment without a package fails before any GPU is requested
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
        # Created first: by the time setup has deployed the run's stack, IAM has propagated the role.
        worker_role = self._ensure_worker_role(run, settings, local)
        outputs = self._ensure_nova_infra(run, settings, local, waiting)
        if outputs is not None:
            self._ensure_workers(run, settings, outputs, local, waiting, task_role_arn=worker_role)
        if waiting:
            raise ProvisioningInProgress(f"run {run.run_id}: " + "; ".join(waiting))
        held = [*run.resources, *local]
        kinds = {CAPACITY_KIND, TASKS_KIND, STACK_KIND, TASK_DEFINITIONS_KIND, WORKER_ROLE_KIND}
        return [r for r in held if r.kind in kinds] or [capacity]

    def _ensure_capacity(
        self, run: RunContext, settings: HyperPodSettings, local: list[CreatedResource], waiting: list[str]
    ) -> CreatedResource:
        resource, awaited = hold_capacity(
            GpuCapacity(self._sm(settings), settings),
            run,
            record=lambda resource: self._record(run, local, resource),
            instance_count=settings.instance_count,
            idle_count=settings.hyperpod_idle_instance_count,
            timeout_minutes=settings.hyperpod_capacity_timeout_minutes,
            clock=self._clock,
        )
        if awaited:
            waiting.append(awaited)
        return resource

    # -- Nova Forge runner -----------------------------------------------------------------------------------

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
        status = JobStatus(
            state=state,
            message=str(report.get("message") or report.get("state", "")),
            progress={k: v for k, v in report.items() if k in {"step", "total_steps", "started_at"}},
            metrics=metrics,
            outputs={k: str(v) for k, v in (report.get("outputs") or {}).items()},
        )
        return self._record_signals(run, settings, status)

    def _record_signals(self, run: RunContext, settings: HyperPodSettings, status: JobStatus) -> JobStatus:
        """Append the signal row of a new step from the reward workers' episode lines of this run (``signals``).
        A failure never fails the poll: it is reported in the progress (``signals_error``, naming the run) and the
        row is tried again next poll."""
        dimensions = {"Environment": settings.environment, WORKER_RUN_DIMENSION: run.run_id}
        now = datetime.fromtimestamp(self._clock(), UTC)
        cloudwatch = self._clients.client("cloudwatch", settings.region)
        progress = dict(status.progress)
        try:
            submitted = self.read_result(run, settings, "submit") or {}
            epoch = submitted.get("finished_at_epoch")
            since = datetime.fromtimestamp(float(epoch), UTC) if isinstance(epoch, int | float) else None
            row_progress = progress
            if "step" not in progress and since is not None:
                progress.update(
                    estimated_progress(
                        cloudwatch,
                        hyperparameters=settings.hyperparameters,
                        dimensions=dimensions,
                        since=since,
                        until=now,
                    )
                    or {}
                )
                # An estimated step must never fail a run as 'incomplete': the rows' planned steps are unknown (0).
                row_progress = {**progress, "total_steps": 0}
            update_signals(
                s3=self._s3(settings),
                cloudwatch=cloudwatch,
                run_id=run.run_id,
                output_uri=run.output_uri,
                dimensions=dimensions,
                progress=row_progress,
                job_started=since,
                now=now,
                group_size=None,  # the recipe's; the workers only see the groups it sends
            )
        except (ClientError, BotoCoreError, SignalsError, BackendError) as error:
            progress["signals_error"] = f"run {run.run_id}: {error}"[:500]
        return replace(status, progress=progress)

    def _cost_so_far(self, run: RunContext, settings: HyperPodSettings) -> float | None:
        """GPU instance-hours held since the scale-up request, priced from prices.json (None when unpriced)."""
        capacity = self._held(run, CAPACITY_KIND)
        if capacity is None or not capacity.details.get("instance_type"):
            return None
        held = replace(capacity, details={**capacity.details, "released_at": now_iso(self._clock)})
        try:
            return float(estimate({"region": settings.region, "gpu_holds": gpu_holds([held])}, load_price_book()).total)
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
