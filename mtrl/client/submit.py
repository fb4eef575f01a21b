"""Submit a dataset: check it locally like the pipeline's Validate step, then upload manifest and dataset."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from mtrl.client.deployment import Deployment, error_code
from mtrl.contracts.errors import ConfigurationError
from mtrl.runs.ids import DATASET_SUFFIX, derive_run_id, manifest_key_for
from mtrl.runs.manifest import RunSettings, parse_manifest, resolve_run_settings
from mtrl.runs.trigger import TRAINING_DATA_PREFIX
from mtrl.settings.pipeline import PipelineSettings
from mtrl.validation.dataset import Limits, ValidationReport
from mtrl.validation.sources import UnknownEnvironmentError, validate_file

Progress = Callable[[int], None]


class SubmitError(Exception):
    """The submission cannot go ahead as asked (bad name, bad manifest, missing file)."""


@dataclass(frozen=True)
class Checked:
    """What local validation found, and the settings it used."""

    settings: RunSettings
    report: ValidationReport
    eval_report: ValidationReport | None
    manifest: dict[str, Any] | None
    manifest_source: str | None

    @property
    def valid(self) -> bool:
        return self.report.valid and (self.eval_report is None or self.eval_report.valid)


@dataclass(frozen=True)
class Submitted:
    run_id: str
    bucket: str
    key: str
    version_id: str | None
    manifest_key: str | None
    eval_key: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "dataset_uri": f"s3://{self.bucket}/{self.key}",
            "version_id": self.version_id,
            "manifest_uri": f"s3://{self.bucket}/{self.manifest_key}" if self.manifest_key else None,
            "eval_uri": f"s3://{self.bucket}/{self.eval_key}" if self.eval_key else None,
        }


def dataset_key(file: Path, name: str | None = None) -> str:
    """``training-data/<name>``: the key whose upload starts a run."""
    base = name or file.name
    if "/" in base or not base.endswith(DATASET_SUFFIX) or base == DATASET_SUFFIX:
        raise SubmitError(f"the dataset name must be a file name ending in {DATASET_SUFFIX} (got {base!r})")
    return TRAINING_DATA_PREFIX + base


def read_manifest(path: Path) -> dict[str, Any]:
    try:
        return parse_manifest(path.read_bytes(), source=str(path))
    except OSError as error:
        raise SubmitError(f"{path}: {error.strerror or error}") from None
    except ConfigurationError as error:
        raise SubmitError(str(error)) from None


def remote_manifest(s3: Any, bucket: str, key: str) -> dict[str, Any] | None:
    """The manifest already next to the dataset key (the run would use it), if there is one."""
    try:
        body = s3.get_object(Bucket=bucket, Key=manifest_key_for(key))["Body"].read()
    except ClientError as error:
        if error_code(error) in {"NoSuchKey", "404", "NotFound"}:
            return None
        raise
    try:
        return parse_manifest(body, source=f"s3://{bucket}/{manifest_key_for(key)}")
    except ConfigurationError as error:
        raise SubmitError(f"{error} (pass --manifest to replace it)") from None


def check(
    file: Path,
    manifest: dict[str, Any] | None,
    *,
    manifest_source: str | None = None,
    eval_file: Path | None = None,
    max_errors: int = 50,
    defaults: PipelineSettings | None = None,
) -> Checked:
    """Validate as the pipeline will: the manifest over the deployment's run settings (``defaults``; the built-in
    defaults when not given), then the dataset rows."""
    defaults = defaults or PipelineSettings.model_validate({})
    try:
        settings = resolve_run_settings(defaults, manifest, source=manifest_source or "default settings")
    except ConfigurationError as error:
        raise SubmitError(str(error)) from None
    if settings.eval_dataset and eval_file is None:
        raise SubmitError(
            f"the manifest names eval_dataset {settings.eval_dataset!r}: pass the local file with --eval-file "
            "(it is uploaded to that key)"
        )
    if eval_file is not None and not settings.eval_dataset:
        raise SubmitError("--eval-file needs eval_dataset (a key under eval-data/) in the manifest")
    limits = Limits.from_settings(defaults, max_errors=max_errors)
    try:
        report, eval_report = validate_file(
            file, environment=settings.environment, limits=limits, eval_split=settings.eval_split, eval_path=eval_file
        )
    except UnknownEnvironmentError as error:
        where = manifest_source or "the deployment's run_environment"
        raise SubmitError(f"{where}: environment: {error}") from None
    return Checked(settings, report, eval_report, manifest, manifest_source)


def upload(
    s3: Any,
    deployment: Deployment,
    file: Path,
    *,
    key: str,
    manifest: dict[str, Any] | None,
    eval_file: Path | None = None,
    eval_key: str | None = None,
    progress: Progress | None = None,
) -> Submitted:
    """Upload eval data and manifest first (the trigger reads the manifest when the dataset arrives), then
    the dataset; the run id is derived from the stored version exactly as the trigger derives it."""
    bucket = deployment.bucket
    if eval_file is not None and eval_key:
        s3.upload_file(str(eval_file), bucket, eval_key, ExtraArgs={"ContentType": "application/x-ndjson"})
    manifest_key = None
    if manifest is not None:
        manifest_key = manifest_key_for(key)
        s3.put_object(
            Bucket=bucket,
            Key=manifest_key,
            Body=json.dumps(manifest, indent=2, sort_keys=True).encode(),
            ContentType="application/json",
        )
    version_id = _upload_with_version(s3, file, bucket, key, progress)
    request: dict[str, Any] = {"Bucket": bucket, "Key": key}
    if version_id:
        request["VersionId"] = version_id
    head = s3.head_object(**request)
    run_id = derive_run_id(bucket=bucket, key=key, version_id=version_id, created=head["LastModified"])
    return Submitted(run_id, bucket, key, version_id, manifest_key, eval_key)


def _upload_with_version(s3: Any, file: Path, bucket: str, key: str, progress: Progress | None) -> str | None:
    """upload_file (multipart for big files, progress callbacks) does not return the response, so the
    version id is taken from the PutObject / CompleteMultipartUpload reply as it passes by."""
    captured: dict[str, str | None] = {}

    def remember(parsed: dict[str, Any], **_: Any) -> None:
        if "VersionId" in parsed or "ETag" in parsed:
            captured["version_id"] = parsed.get("VersionId")

    events = s3.meta.events
    handlers = [f"after-call.s3.{operation}" for operation in ("PutObject", "CompleteMultipartUpload")]
    for name in handlers:
        events.register(name, remember, unique_id=f"mtrl-submit-{name}")
    try:
        s3.upload_file(str(file), bucket, key, ExtraArgs={"ContentType": "application/x-ndjson"}, Callback=progress)
    finally:
        for name in handlers:
            events.unregister(name, unique_id=f"mtrl-submit-{name}")
    if "version_id" not in captured:  # cannot happen with boto3's uploader; refuse to guess a run id
        raise SubmitError(f"s3://{bucket}/{key}: the upload reported no object version")
    return captured["version_id"]
