"""Step Functions 'Execution Status Change' (aborted, timed out, failed) → teardown and report if still due."""

from mtrl.runs.lambda_support import lambda_entry
from mtrl.runs.phases.reaper import reap

handler = lambda_entry(reap)
