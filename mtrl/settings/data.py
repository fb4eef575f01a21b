"""Data settings: the encryption key, the data bucket and the run table."""

from __future__ import annotations

from pydantic import Field, field_validator

from mtrl.settings.base import SettingsGroup
from mtrl.settings.network import check_retention_days


class DataSettings(SettingsGroup):
    """The customer-managed key, the data and access-log buckets, and the run table."""

    retain_data: bool = Field(
        True,
        description="Keep the data bucket, access-log bucket, run table and key when the stack is deleted.",
    )
    noncurrent_version_expiration_days: int = Field(
        90, ge=1, description="Days after which replaced or deleted dataset versions are removed."
    )
    run_artifact_expiration_days: int = Field(
        365, ge=0, description="Days after which objects under runs/ expire (0 keeps them forever)."
    )
    access_log_expiration_days: int = Field(
        365, ge=1, description="Days after which S3 server access logs in the log bucket expire."
    )
    log_retention_days: int = Field(
        365, description="Retention of the CloudWatch log groups mtrl creates (pipeline, workers), in days."
    )

    @field_validator("log_retention_days")
    @classmethod
    def _log_retention_is_allowed(cls, value: int) -> int:
        return check_retention_days(value)
