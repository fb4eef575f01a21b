"""Try to take a concurrency slot in arrival order (the state machine waits and retries when none is free)."""

from mtrl.runs.lambda_support import lambda_entry
from mtrl.runs.phases.slot import acquire_slot

handler = lambda_entry(acquire_slot)
