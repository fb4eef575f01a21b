"""A RayJob's status as a run's state (KubeRay 1.7.0 ``rayjob_types.go``).

``jobDeploymentStatus`` decides, never ``jobStatus`` alone: ``jobStatus`` can stay RUNNING while the deployment is
Failed (kuberay issue #2314). A Complete job is SUCCEEDED only when the trainer's last reported step equals the
planned steps (verl can exit cleanly after 0 steps on resume: verl #5725); the step comes from the trainer's
``progress.json`` in the run's output prefix (mtrl.backends.verl.rayjob).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mtrl.contracts.backend import JobState, JobStatus

PENDING_DEPLOYMENTS = {"", "New", "Initializing", "Waiting", "Suspending", "Suspended"}
RUNNING_DEPLOYMENTS = {"Running", "Retrying"}
FAILED_DEPLOYMENTS = {"Failed", "ValidationFailed"}


def job_status(rayjob: Mapping[str, Any], *, planned_steps: int, last_step: int | None) -> JobStatus:
    status = rayjob.get("status") or {}
    deployment = str(status.get("jobDeploymentStatus") or "")
    job = str(status.get("jobStatus") or "")
    reason = str(status.get("reason") or "")
    detail = str(status.get("message") or "")
    progress: dict[str, Any] = {"total_steps": planned_steps}
    if last_step is not None:
        progress["step"] = last_step
    said = f"RayJob {deployment or 'New'}/{job or '-'}" + (f" ({reason})" if reason else "")
    if deployment in FAILED_DEPLOYMENTS:
        return JobStatus(JobState.FAILED, f"{said}: {detail or 'no message'}", progress)
    if deployment == "Complete":
        return _completed(job, said, detail, progress, planned_steps=planned_steps, last_step=last_step)
    if deployment in RUNNING_DEPLOYMENTS:
        return JobStatus(JobState.RUNNING, said, progress)
    if deployment in PENDING_DEPLOYMENTS:
        return JobStatus(JobState.PENDING, said, progress)
    # A status this mtrl does not know: keep polling (the run timeout still bounds it), and say so.
    return JobStatus(JobState.RUNNING, f"{said}: unknown deployment status", progress)


def _completed(
    job: str, said: str, detail: str, progress: dict[str, Any], *, planned_steps: int, last_step: int | None
) -> JobStatus:
    if job == "STOPPED":
        return JobStatus(JobState.STOPPED, said, progress)
    if job != "SUCCEEDED":
        return JobStatus(JobState.FAILED, f"{said}: {detail or 'the job did not succeed'}", progress)
    if last_step == planned_steps:
        return JobStatus(JobState.SUCCEEDED, said, progress)
    reached = "no step reported" if last_step is None else f"step {last_step}"
    return JobStatus(
        JobState.FAILED, f"{said}, but training ended at {reached} of {planned_steps} planned steps", progress
    )
