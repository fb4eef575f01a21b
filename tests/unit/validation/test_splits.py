"""The eval_split writer (mtrl.validation.splits) against moto S3: the split files validation's counts promise."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from mtrl.validation.dataset import DatasetValidator, eval_split_of
from mtrl.validation.sources import validate_s3_object
from mtrl.validation.splits import SplitSourceError, write_eval_split
from tests.aws_fixtures import create_versioned_bucket

REGION = "us-east-1"
BUCKET = "mtrl-data-test"
SOURCE = "training-data/words.jsonl"
TRAIN, EVAL = "runs/r1/data/train.jsonl", "runs/r1/data/eval.jsonl"


@pytest.fixture
def s3(mocked_aws: None) -> Any:
    client = boto3.client("s3", region_name=REGION)
    create_versioned_bucket(client, BUCKET)
    return client


def _line(i: int, *, pad: int = 0) -> bytes:
    # Spacing and key order as a user wrote them: the split must keep these bytes, not re-serialise the row.
    row = {"metadata": {"prompt": f"task {i} " + "x" * pad, "answer": str(i)}, "id": f"row-{i}"}
    return json.dumps(row, indent=None, separators=(", ", " : ")).encode()


def _upload(s3: Any, body: bytes) -> str:
    return str(s3.put_object(Bucket=BUCKET, Key=SOURCE, Body=body)["VersionId"])


def _read(s3: Any, key: str) -> bytes:
    return bytes(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())


def _split(s3: Any, version: str | None, eval_split: float = 0.3, **kwargs: Any) -> Any:
    return write_eval_split(
        s3,
        bucket=BUCKET,
        key=SOURCE,
        version_id=version,
        eval_split=eval_split,
        out_bucket=BUCKET,
        train_key=TRAIN,
        eval_key=EVAL,
        max_line_bytes=1024 * 1024,
        **kwargs,
    )


def test_the_splits_partition_the_upload_byte_for_byte_in_order_by_the_validation_rule(s3: Any) -> None:
    lines = [_line(i) for i in range(200)]
    # A CRLF line and a last line without a newline: each row keeps its own bytes, every split row ends in "\n".
    lines[7] += b"\r"
    body = b"\n".join(lines)
    version = _upload(s3, body)
    files = _split(s3, version)
    train, held_out = _read(s3, TRAIN), _read(s3, EVAL)
    in_eval = [eval_split_of(f"row-{i}", 0.3) for i in range(200)]
    assert held_out == b"".join(line + b"\n" for line, e in zip(lines, in_eval, strict=True) if e)
    assert train == b"".join(line + b"\n" for line, e in zip(lines, in_eval, strict=True) if not e)
    assert sorted(train.splitlines() + held_out.splitlines()) == sorted(body.splitlines())  # the union is the upload
    assert (files.train_rows, files.eval_rows) == (in_eval.count(False), in_eval.count(True))
    assert 0 < files.eval_rows < 200
    assert (files.train_bytes, files.eval_bytes) == (len(train), len(held_out))
    assert (files.train_uri, files.eval_uri) == (f"s3://{BUCKET}/{TRAIN}", f"s3://{BUCKET}/{EVAL}")


def test_the_split_matches_what_validation_counted(s3: Any) -> None:
    version = _upload(s3, b"".join(_line(i) + b"\n" for i in range(500)))
    validator = DatasetValidator(eval_split=0.2)
    report = validate_s3_object(s3, bucket=BUCKET, key=SOURCE, version_id=version, validator=validator)
    assert report.valid, report.summary()
    files = _split(s3, version, eval_split=0.2)
    assert (files.train_rows + files.eval_rows, files.eval_rows) == (report.rows, report.eval_rows)
    # Validation on the written files finds the same rows and no overlap between them.
    for key, rows in ((TRAIN, files.train_rows), (EVAL, files.eval_rows)):
        again = validate_s3_object(s3, bucket=BUCKET, key=key, version_id=None, validator=DatasetValidator())
        assert again.valid
        assert again.rows == rows


def test_the_validated_version_is_split_even_after_a_newer_upload(s3: Any) -> None:
    version = _upload(s3, b"".join(_line(i) + b"\n" for i in range(50)))
    _upload(s3, b"".join(_line(i) + b"\n" for i in range(1000, 1003)))
    files = _split(s3, version)
    assert files.train_rows + files.eval_rows == 50


def test_a_retry_rewrites_identical_objects(s3: Any) -> None:
    version = _upload(s3, b"".join(_line(i) + b"\n" for i in range(300)))
    first = _split(s3, version)
    before = _read(s3, TRAIN), _read(s3, EVAL)
    second = _split(s3, version)
    assert second == first
    assert (_read(s3, TRAIN), _read(s3, EVAL)) == before


def test_large_splits_stream_as_multipart_uploads_with_the_same_bytes(s3: Any) -> None:
    # S3 parts other than the last must be >= 5 MiB, so the smallest real part size is used: ~24 MiB of rows.
    lines = [_line(i, pad=6000) for i in range(4000)]
    version = _upload(s3, b"\n".join(lines) + b"\n")
    part = 5 * 1024 * 1024
    calls: list[str] = []
    s3.meta.events.register("before-call.s3.*", lambda model, **_: calls.append(model.name))
    files = _split(s3, version, part_bytes=part)
    in_eval = [eval_split_of(f"row-{i}", 0.3) for i in range(4000)]
    assert _read(s3, TRAIN) == b"".join(line + b"\n" for line, e in zip(lines, in_eval, strict=True) if not e)
    assert _read(s3, EVAL) == b"".join(line + b"\n" for line, e in zip(lines, in_eval, strict=True) if e)
    assert files.train_bytes > 2 * part  # the training split needed several parts
    assert calls.count("CompleteMultipartUpload") == 2
    assert calls.count("UploadPart") >= 4
    assert "PutObject" not in calls
    assert s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []


def test_a_source_that_is_not_the_validated_dataset_fails_and_leaves_no_upload_behind(s3: Any) -> None:
    lines = [_line(i, pad=6000) for i in range(2000)] + [b"not json"]
    version = _upload(s3, b"\n".join(lines) + b"\n")
    with pytest.raises(SplitSourceError, match="line 2001 is not a JSON row"):
        _split(s3, version, part_bytes=5 * 1024 * 1024)
    assert s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []  # the open uploads were aborted
    keys = [item["Key"] for item in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    assert keys == [SOURCE]


def test_eval_split_out_of_range_is_refused(s3: Any) -> None:
    with pytest.raises(ValueError, match="eval_split must be between 0 and 1"):
        _split(s3, None, eval_split=0.0)
