"""The backend function's phases by the event's ``action`` (one function holds the backend permissions)."""

from __future__ import annotations

from mtrl.runs.phases.context import Phase
from mtrl.runs.phases.evaluate import baseline, evaluate
from mtrl.runs.phases.provision import preflight, provision
from mtrl.runs.phases.teardown import teardown
from mtrl.runs.phases.train import check_status, submit

BACKEND_ACTIONS: dict[str, Phase] = {
    "preflight": preflight,
    "provision": provision,
    "submit": submit,
    "status": check_status,
    "baseline": baseline,
    "evaluate": evaluate,
    "teardown": teardown,
}
