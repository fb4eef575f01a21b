"""Run the dataset validator on a local file or an S3 object (streamed, never downloaded whole)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtrl.envs.registry import EnvironmentNotFoundError, InvalidEnvironmentError, load_spec
from mtrl.validation.dataset import DatasetValidator, Limits, TaskCheck, ValidationReport
from mtrl.validation.lines import Readable

if TYPE_CHECKING:
    from mtrl.validation.splits import ObjectWriter


class UnknownEnvironmentError(LookupError):
    """The dataset names an environment this deployment does not have."""


def environment_check(env_id: str) -> TaskCheck:
    """The environment's own row check (``validate_task``), from the environment registry."""
    try:
        spec = load_spec(env_id)
    except (EnvironmentNotFoundError, InvalidEnvironmentError) as error:
        raise UnknownEnvironmentError(str(error)) from None
    return spec.validate_task


def validate_file(
    path: Path,
    *,
    environment: str | None = None,
    limits: Limits | None = None,
    eval_split: float = 0.0,
    eval_path: Path | None = None,
    task_check: TaskCheck | None = None,
) -> tuple[ValidationReport, ValidationReport | None]:
    """Validate ``path`` (and the evaluation file, if any); returns (training report, evaluation report)."""
    check = task_check or (environment_check(environment) if environment else None)
    holdout_report = None
    holdout = None
    if eval_path is not None:
        holdout = DatasetValidator(limits=limits, task_check=check, environment=environment, index_tasks=True)
        with eval_path.open("rb") as stream:
            holdout_report = holdout.validate(stream, source=str(eval_path), size=os.path.getsize(eval_path))
    validator = DatasetValidator(
        limits=limits, task_check=check, environment=environment, eval_split=eval_split, holdout=holdout
    )
    with path.open("rb") as stream:
        report = validator.validate(stream, source=str(path), size=os.path.getsize(path))
    return report, holdout_report


def validate_s3_object(
    s3: Any,
    *,
    bucket: str,
    key: str,
    version_id: str | None,
    validator: DatasetValidator,
    copy_to: tuple[str, str] | None = None,
    part_bytes: int | None = None,
) -> ValidationReport:
    """Stream one object version through ``validator`` (size checked from the response before reading).

    ``copy_to`` (bucket, key): the bytes the validator read are also written there, and the copy is completed only
    when the report is valid. A run trains on that copy, so what it reads is exactly what was validated, whatever
    is uploaded over the key afterwards and whether or not the event named a version.
    """
    request: dict[str, Any] = {"Bucket": bucket, "Key": key}
    if version_id:
        request["VersionId"] = version_id
    response = s3.get_object(**request)
    body = response["Body"]
    from mtrl.validation.splits import PART_BYTES, ObjectWriter  # noqa: PLC0415 - boto's errors: only for S3 reads

    part = part_bytes or PART_BYTES
    copy = None if copy_to is None else ObjectWriter(s3, bucket=copy_to[0], key=copy_to[1], part_bytes=part)
    try:
        source = f"s3://{bucket}/{key}" + (f"?versionId={version_id}" if version_id else "")
        stream: Readable = body if copy is None else _Tee(body, copy)
        report = validator.validate(stream, source=source, size=int(response.get("ContentLength", 0)) or None)
        if copy is not None:
            if report.valid:
                while stream.read(_DRAIN_BYTES):  # a valid report read every byte; copy whatever it did not
                    pass
                copy.close()
            else:
                copy.abort()
        return report
    except BaseException:
        if copy is not None:
            copy.abort()
        raise
    finally:
        body.close()


_DRAIN_BYTES = 1024 * 1024


class _Tee:
    """A readable stream that also writes every byte read to an ``ObjectWriter``."""

    def __init__(self, stream: Readable, copy: ObjectWriter) -> None:
        self._stream, self._copy = stream, copy

    def read(self, size: int = -1, /) -> bytes:
        data = self._stream.read(size)
        if data:
            self._copy.write(data)
        return data
