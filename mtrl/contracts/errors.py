"""Errors the pipeline phases raise. Their class names are the Step Functions error names.

The state machine retries only ``TransientError`` (and Lambda service faults) and, in teardown,
``TeardownIncomplete``; every other error fails fast into teardown and report.
"""

from __future__ import annotations


class PipelineError(Exception):
    """Base class; the message is shown to users in the run summary and the notification."""

    plain = "the run failed"


class ConfigurationError(PipelineError):
    plain = "the run settings (manifest or deployment configuration) are invalid"


class DatasetInvalid(PipelineError):
    plain = "the dataset is invalid"


class PreflightFailed(PipelineError):
    plain = "a preflight check failed before anything was provisioned"


class BackendFailed(PipelineError):
    plain = "the training backend reported an error"


class JobFailed(PipelineError):
    plain = "the training job failed"


class RunTimedOut(PipelineError):
    plain = "the training job ran longer than the run timeout and was cancelled"


class EarlyStopped(PipelineError):
    plain = "a training-health rule reached its stop level and early_stop cancelled the job"


class BudgetExceeded(PipelineError):
    plain = "the run's cost exceeded its budget and the job was cancelled"


class SlotWaitTimedOut(PipelineError):
    plain = "the run waited too long for a free training slot"


class TransientError(PipelineError):
    """Throttling or a service fault: safe to retry with backoff."""

    plain = "an AWS service kept failing temporarily"


class TeardownIncomplete(PipelineError):
    """Some created resources could not be removed yet; teardown is idempotent and is retried."""

    plain = "teardown could not remove every resource"


class InternalError(PipelineError):
    """An unexpected failure (a bug): never retried, always reported with the run id."""

    plain = "an internal error occurred"


# Step Functions / Lambda error names that are not ours, in plain words.
PLAIN_WORDS: dict[str, str] = {
    cls.__name__: cls.plain
    for cls in (
        ConfigurationError,
        DatasetInvalid,
        PreflightFailed,
        BackendFailed,
        JobFailed,
        RunTimedOut,
        BudgetExceeded,
        EarlyStopped,
        SlotWaitTimedOut,
        TransientError,
        TeardownIncomplete,
        InternalError,
    )
} | {
    "States.Timeout": "a step took longer than its time limit",
    "States.TaskFailed": "a step failed",
    "States.Runtime": "the state machine hit a runtime error",
    "Lambda.ServiceException": "the Lambda service kept failing",
    "Lambda.TooManyRequestsException": "Lambda kept throttling the pipeline",
    "Aborted": "the run was stopped (execution aborted)",
    "ExecutionTimedOut": "the whole run exceeded the state machine's time limit",
}


def in_plain_words(error: str) -> str:
    return PLAIN_WORDS.get(error, f"the step failed with {error}")
