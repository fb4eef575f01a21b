"""The in-account builders' roles as synthesized (stacks/constructs/image_builder.py) allow the S3 calls their
buildspecs make, and nothing of the bucket beyond them: the model import job reads its source archive and writes the
copy under models/ (``aws s3 cp --recursive``: PutObject, and multipart for large weight files); the image build reads
its archive and writes nothing to the bucket."""

from __future__ import annotations

import pytest

from tests.contract.iam_contract import AppModel, AwsCall, assert_calls_allowed
from tests.contract.recorded_runs import deployed_data_bucket

MODEL_ROLE = "mtrl-backends/ImageBuilder/ModelProject/Role"
IMAGE_ROLE = "mtrl-backends/ImageBuilder/ImageProject/Role"
REGION = "us-east-1"
COPY = "models/Qwen/Qwen2.5-0.5B-Instruct/" + "a" * 40 + "/"


def _s3(operation: str, bucket: str, key: str, **params: object) -> AwsCall:
    return AwsCall("s3", operation, {"Bucket": bucket, "Key": key, **params}, REGION)


def _copy_calls(bucket: str, prefix: str) -> list[AwsCall]:
    return [
        _s3("PutObject", bucket, prefix + "config.json", Body=b"{}"),
        _s3("PutObject", bucket, prefix + "SHA256SUMS", Body=b"x"),
        _s3("CreateMultipartUpload", bucket, prefix + "model.safetensors"),
        _s3("UploadPart", bucket, prefix + "model.safetensors", UploadId="u", PartNumber=1),
        _s3("CompleteMultipartUpload", bucket, prefix + "model.safetensors", UploadId="u"),
    ]


def test_the_model_import_job_may_read_its_archive_and_write_the_copy(app_model: AppModel) -> None:
    bucket = deployed_data_bucket(app_model)
    calls = [_s3("GetObject", bucket, "image-builds/" + "b" * 64 + ".zip"), *_copy_calls(bucket, COPY)]
    assert_calls_allowed(calls, MODEL_ROLE, model=app_model)


@pytest.mark.parametrize("prefix", ["runs/wordle-1/", "training-data/", "image-builds/"])
def test_the_model_import_job_writes_nowhere_else(app_model: AppModel, prefix: str) -> None:
    bucket = deployed_data_bucket(app_model)
    with pytest.raises(AssertionError, match="PutObject"):
        assert_calls_allowed(_copy_calls(bucket, prefix)[:1], MODEL_ROLE, model=app_model)


def test_the_image_build_reads_its_archive_and_writes_nothing_to_the_bucket(app_model: AppModel) -> None:
    bucket = deployed_data_bucket(app_model)
    assert_calls_allowed([_s3("GetObject", bucket, "image-builds/c.zip")], IMAGE_ROLE, model=app_model)
    with pytest.raises(AssertionError, match="PutObject"):
        assert_calls_allowed(_copy_calls(bucket, COPY)[:1], IMAGE_ROLE, model=app_model)
    with pytest.raises(AssertionError, match="GetObject"):
        assert_calls_allowed([_s3("GetObject", bucket, "runs/wordle-1/data/train.jsonl")], IMAGE_ROLE, model=app_model)
