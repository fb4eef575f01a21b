"""The backend phases (preflight, provision, submit, status, evaluate, teardown) through the run's adapter.

One function holds the backend permissions; the event's ``action`` picks the phase.
"""

from mtrl.runs.lambda_support import dispatch, lambda_entry
from mtrl.runs.phases.actions import BACKEND_ACTIONS

handler = lambda_entry(dispatch(BACKEND_ACTIONS))
