"""The pipeline's phases under one name (each lives in its own module of ``mtrl.runs.phases``).

The Lambda handlers import their phase module directly; this facade keeps the names callers outside the pipeline
(the CLI, tests, docs) know.
"""

from __future__ import annotations

from mtrl.runs.phases.actions import BACKEND_ACTIONS
from mtrl.runs.phases.context import Event, Phase
from mtrl.runs.phases.evaluate import baseline, evaluate
from mtrl.runs.phases.provision import preflight, provision
from mtrl.runs.phases.reaper import STEP_OF_PHASE, reap
from mtrl.runs.phases.register import register
from mtrl.runs.phases.report import report
from mtrl.runs.phases.run_view import RunView
from mtrl.runs.phases.slot import acquire_slot
from mtrl.runs.phases.teardown import teardown
from mtrl.runs.phases.train import check_status, submit
from mtrl.runs.phases.validate import split_keys, validate

__all__ = [
    "BACKEND_ACTIONS",
    "STEP_OF_PHASE",
    "Event",
    "Phase",
    "RunView",
    "acquire_slot",
    "baseline",
    "check_status",
    "evaluate",
    "preflight",
    "provision",
    "reap",
    "register",
    "report",
    "split_keys",
    "submit",
    "teardown",
    "validate",
]
