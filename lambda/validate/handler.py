"""Stream the dataset from S3 through the validator; write runs/<run-id>/validation.json; fail fast if invalid."""

from mtrl.runs.lambda_support import lambda_entry
from mtrl.runs.phases.validate import validate

handler = lambda_entry(validate)
