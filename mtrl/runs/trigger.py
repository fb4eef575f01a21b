"""Upload trigger: an S3 'Object Created' event becomes (at most) one pipeline execution named by run id."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote_plus

from botocore.exceptions import ClientError

from mtrl.contracts.errors import ConfigurationError, InternalError
from mtrl.runs.ids import DATASET_SUFFIX, derive_run_id, manifest_key_for
from mtrl.runs.manifest import MAX_MANIFEST_BYTES, parse_manifest
from mtrl.runs.registry import raise_for_client_error
from mtrl.runs.runtime import Runtime

TRAINING_DATA_PREFIX = "training-data/"
_MISSING = {"NoSuchKey", "NoSuchVersion", "404", "NotFound"}


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _head(runtime: Runtime, bucket: str, key: str, version_id: str | None) -> tuple[str, dict[str, Any]] | None:
    """HEAD the uploaded version; S3 may deliver URL-encoded keys, so the decoded form is tried too."""
    for candidate in dict.fromkeys((key, unquote_plus(key))):
        request: dict[str, Any] = {"Bucket": bucket, "Key": candidate}
        if version_id:
            request["VersionId"] = version_id
        try:
            return candidate, runtime.s3.head_object(**request)
        except ClientError as error:
            if _code(error) not in _MISSING:
                raise_for_client_error(error, f"reading s3://{bucket}/{candidate}")
    return None


def _manifest(runtime: Runtime, bucket: str, key: str) -> dict[str, Any]:
    manifest_key = manifest_key_for(key)
    uri = f"s3://{bucket}/{manifest_key}"
    try:
        response = runtime.s3.get_object(Bucket=bucket, Key=manifest_key)
    except ClientError as error:
        if _code(error) in _MISSING:
            return {}
        return {"manifest_error": f"manifest {uri} could not be read ({_code(error)})"}
    body = response["Body"].read(MAX_MANIFEST_BYTES + 1)
    reference = {"uri": uri, "version_id": response.get("VersionId")}
    if len(body) > MAX_MANIFEST_BYTES:
        return {
            "manifest_ref": reference,
            "manifest_error": f"manifest {uri} is larger than {MAX_MANIFEST_BYTES} bytes",
        }
    try:
        # Parsed once, here, where the manifest enters the pipeline: a broken document is refused line-numbered before
        # it travels in the execution input, and Register resolves the settings from the parsed document.
        document = parse_manifest(body, source=uri)
    except ConfigurationError as error:
        return {"manifest_ref": reference, "manifest_error": str(error)}
    return {"manifest_ref": reference, "manifest": document}


def _event_fields(event: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """(bucket, key, version id) of an EventBridge S3 'Object Created' event; InternalError for anything else."""
    detail = event.get("detail") if isinstance(event, Mapping) else None
    bucket = detail.get("bucket") if isinstance(detail, Mapping) else None
    obj = detail.get("object") if isinstance(detail, Mapping) else None
    name = bucket.get("name") if isinstance(bucket, Mapping) else None
    key = obj.get("key") if isinstance(obj, Mapping) else None
    version_id = obj.get("version-id") if isinstance(obj, Mapping) else None
    if not isinstance(name, str) or not name or not isinstance(key, str) or not key:
        shown = json.dumps(event, default=str, ensure_ascii=True)[:300]
        raise InternalError(f"not an S3 Object Created event (needs detail.bucket.name and detail.object.key): {shown}")
    if version_id is not None and not isinstance(version_id, str):
        raise InternalError(f"s3://{name}/{key}: detail.object.version-id must be a string (got {version_id!r})")
    return name, key, version_id


def handle_upload(runtime: Runtime, event: Mapping[str, Any]) -> dict[str, Any]:
    bucket, key, version_id = _event_fields(event)
    if bucket != runtime.bucket or not key.startswith(TRAINING_DATA_PREFIX) or not key.endswith(DATASET_SUFFIX):
        return {"status": "IGNORED", "reason": f"s3://{bucket}/{key} is not a training-data/*.jsonl upload"}
    found = _head(runtime, bucket, key, version_id)
    if found is None:
        return {"status": "IGNORED", "reason": f"s3://{bucket}/{key} (version {version_id}) no longer exists"}
    key, head = found
    if version_id is None and head.get("VersionId") not in (None, "null"):
        # An event without a version id (some emulators, or a bucket that only just enabled versioning):
        # the object read is the version this run is about, so name the run after it like `mtrl submit` does.
        version_id = str(head["VersionId"])
    run_id = derive_run_id(bucket=bucket, key=key, version_id=version_id, created=head["LastModified"])
    execution_input = {
        "run_id": run_id,
        "bucket": bucket,
        "key": key,
        "version_id": version_id,
        "size": int(head.get("ContentLength", 0)),
        "created_at": head["LastModified"].isoformat().replace("+00:00", "Z"),
        **_manifest(runtime, bucket, key),
    }
    try:
        response = runtime.stepfunctions.start_execution(
            stateMachineArn=runtime.state_machine_arn,
            name=run_id,
            # Unescaped UTF-8: the manifest travels as its text and as its document, and escaped a 64 KiB manifest of
            # emoji would be six times as large, over Step Functions' 256 KiB input (UTF-8 keeps it within 3×).
            input=json.dumps(execution_input, sort_keys=True, ensure_ascii=False),
        )
    except ClientError as error:
        if _code(error) == "ExecutionAlreadyExists":
            return {"status": "DUPLICATE", "run_id": run_id}
        raise_for_client_error(error, f"run {run_id}: starting the pipeline execution")
        raise
    return {"status": "STARTED", "run_id": run_id, "execution_arn": response["executionArn"]}
