"""EventBridge 'Object Created' (training-data/*.jsonl) → one pipeline execution named by the run id."""

from mtrl.runs.lambda_support import lambda_entry
from mtrl.runs.trigger import handle_upload

handler = lambda_entry(handle_upload)
