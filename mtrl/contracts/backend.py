"""The backend-neutral adapter interface the pipeline drives (docs/pipeline.md, "For backend authors").

Phases call, in order: ``preflight`` → ``provision`` → ``submit`` → ``status`` (polled) →
``cancel`` (on timeout/abort) → ``cleanup`` (always, idempotent). Every resource an adapter is about to
create is first passed to ``RunContext.record_resource`` so teardown can always find it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol


class JobState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"

    @property
    def terminal(self) -> bool:
        return self in {JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED}


@dataclass(frozen=True)
class CreatedResource:
    """Something a run creates and teardown must remove (kind is adapter-defined, e.g. 'ecs-service')."""

    kind: str
    identifier: str
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunContext:
    """What an adapter knows about the run it serves."""

    run_id: str
    settings: Mapping[str, Any]  # the run's effective settings (manifest over deploy defaults)
    dataset_uri: str  # s3://bucket/key of the validated training split
    eval_dataset_uri: str | None
    output_uri: str  # s3://bucket/runs/<run-id>/
    resources: tuple[CreatedResource, ...] = ()  # what earlier phases recorded
    record_resource: Callable[[CreatedResource], None] = lambda _resource: None


@dataclass(frozen=True)
class Finding:
    """A preflight result: ``ok`` False stops the run before anything is provisioned."""

    check: str
    ok: bool
    message: str


@dataclass(frozen=True)
class JobStatus:
    state: JobState
    message: str = ""
    progress: Mapping[str, Any] = field(default_factory=dict)  # e.g. {"step": 12, "total_steps": 100}
    metrics: Mapping[str, float] = field(default_factory=dict)  # e.g. {"reward_mean": 0.41}
    outputs: Mapping[str, str] = field(default_factory=dict)  # e.g. {"model_uri": "s3://..."}


class BackendError(RuntimeError):
    """A failure the pipeline reports in plain words. ``transient`` failures may be retried."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class BackendAdapter(Protocol):
    name: str

    def preflight(self, run: RunContext) -> list[Finding]: ...

    def provision(self, run: RunContext) -> list[CreatedResource]: ...

    def submit(self, run: RunContext) -> str: ...

    def status(self, run: RunContext, job_id: str) -> JobStatus: ...

    def cancel(self, run: RunContext, job_id: str) -> None: ...

    def cleanup(self, run: RunContext) -> list[CreatedResource]:
        """Remove everything in ``run.resources``; idempotent; returns what was removed."""
        ...
