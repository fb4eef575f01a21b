"""EventBridge schedule → the GPU safety net: scale back GPU groups above idle that no live run holds, and alert."""

from mtrl.runs.capacity_guard import guard
from mtrl.runs.lambda_support import lambda_entry

handler = lambda_entry(guard)
