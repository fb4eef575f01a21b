"""Finalize the run record, write runs/<run-id>/summary.json and publish the run's one notification."""

from mtrl.runs.lambda_support import lambda_entry
from mtrl.runs.phases.report import report

handler = lambda_entry(report)
