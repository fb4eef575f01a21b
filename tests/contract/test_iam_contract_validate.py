"""The IAM contract of the Validate function's copy of the validated upload and its eval_split writer: every call they
make (a version read of the upload, single-part and multipart writes of the copy and the split files under
runs/<id>/data/, and the abort of an abandoned upload) is
allowed for the Validate role as synthesized, on the deployed bucket (SSE-KMS included)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from mtrl.runs.phases.inputs import validated_keys
from mtrl.runs.pipeline import split_keys
from mtrl.validation.dataset import DatasetValidator
from mtrl.validation.sources import validate_s3_object
from mtrl.validation.splits import SplitSourceError, write_eval_split
from tests.aws_fixtures import create_versioned_bucket
from tests.contract.iam_contract import AppModel, AwsCall, CallRecorder, assert_calls_allowed
from tests.contract.recorded_runs import model_account_aws

VALIDATE_FUNCTION = "mtrl-pipeline/Functions/Validate/Fn/Function"
VALIDATE_ROLE = "mtrl-pipeline/Functions/Validate/Role"
PART = 5 * 1024 * 1024  # S3's smallest part size: a few MiB of rows become multipart uploads


def _rows(count: int, *, pad: int) -> bytes:
    return b"".join(
        json.dumps({"id": f"r-{i}", "metadata": {"prompt": f"task {i} " + "x" * pad}}).encode() + b"\n"
        for i in range(count)
    )


@pytest.fixture
def recorded_split(app_model: AppModel, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[AwsCall]]:
    bucket = app_model.function_environment(VALIDATE_FUNCTION)["MTRL_DATA_BUCKET"]
    with model_account_aws(monkeypatch, app_model):
        s3: Any = boto3.client("s3", region_name=app_model.region)
        create_versioned_bucket(s3, bucket)
        big = s3.put_object(Bucket=bucket, Key="training-data/big.jsonl", Body=_rows(3000, pad=6000))["VersionId"]
        small = s3.put_object(Bucket=bucket, Key="training-data/small.jsonl", Body=_rows(40, pad=0))["VersionId"]
        broken = _rows(1500, pad=6000) + b"not json\n"
        bad = s3.put_object(Bucket=bucket, Key="training-data/bad.jsonl", Body=broken)["VersionId"]
        with CallRecorder() as recorder:
            for key, version in (("training-data/big.jsonl", big), ("training-data/small.jsonl", small)):
                # Validation copies what it reads under the run's prefix (the copy the backends are given).
                validate_s3_object(
                    s3,
                    bucket=bucket,
                    key=key,
                    version_id=version,
                    validator=DatasetValidator(),
                    copy_to=(bucket, validated_keys(f"run-{version[:6]}")[0]),
                    part_bytes=PART,
                )
            for key, version in (("training-data/big.jsonl", big), ("training-data/small.jsonl", small)):
                train_key, eval_key = split_keys(f"run-{version[:6]}")
                write_eval_split(
                    s3,
                    bucket=bucket,
                    key=key,
                    version_id=version,
                    eval_split=0.3,
                    out_bucket=bucket,
                    train_key=train_key,
                    eval_key=eval_key,
                    max_line_bytes=1024 * 1024,
                    part_bytes=PART,
                )
            train_key, eval_key = split_keys("run-bad")
            with pytest.raises(SplitSourceError):
                write_eval_split(
                    s3,
                    bucket=bucket,
                    key="training-data/bad.jsonl",
                    version_id=bad,
                    eval_split=0.3,
                    out_bucket=bucket,
                    train_key=train_key,
                    eval_key=eval_key,
                    max_line_bytes=1024 * 1024,
                    part_bytes=PART,
                )
        yield recorder.calls


def test_the_split_writer_calls_are_allowed_for_the_validate_role(
    recorded_split: list[AwsCall], app_model: AppModel
) -> None:
    operations = {str(call) for call in recorded_split}
    assert operations == {
        "s3.GetObject",
        "s3.PutObject",
        "s3.CreateMultipartUpload",
        "s3.UploadPart",
        "s3.CompleteMultipartUpload",
        "s3.AbortMultipartUpload",
    }, operations
    assert_calls_allowed(recorded_split, VALIDATE_ROLE, model=app_model)
