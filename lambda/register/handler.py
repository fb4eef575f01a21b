"""Register the run: record it, resolve its settings (manifest over defaults) and queue it for a slot."""

from mtrl.runs.lambda_support import lambda_entry
from mtrl.runs.phases.register import register

handler = lambda_entry(register)
