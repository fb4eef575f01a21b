"""Dataset validation shared by the pipeline's validate step and `mtrl validate`."""

from mtrl.validation.dataset import DatasetValidator, Issue, Limits, ValidationReport, eval_split_of
from mtrl.validation.sources import UnknownEnvironmentError, environment_check, validate_file, validate_s3_object

__all__ = [
    "DatasetValidator",
    "Issue",
    "Limits",
    "UnknownEnvironmentError",
    "ValidationReport",
    "environment_check",
    "eval_split_of",
    "validate_file",
    "validate_s3_object",
]
