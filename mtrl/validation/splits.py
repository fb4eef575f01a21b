"""Write a validated dataset's training and evaluation splits (``eval_split``) as two S3 objects, streamed.

Rows go to the split ``eval_split_of`` (the rule validation counts with) names, byte for byte as uploaded and in
upload order; every row ends in a newline (an upload's last line may lack one). Memory is bounded by two part
buffers, whatever the dataset's size: an object that outgrows one buffer becomes a multipart upload. The objects
are a function of the source version alone, so a retry rewrites identical objects.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, TypedDict

import msgspec
from botocore.exceptions import ClientError

from mtrl.validation.dataset import eval_split_of
from mtrl.validation.lines import iter_line_blocks
from mtrl.validation.strict_json import FAST_DECODER

# S3's minimum part size is 5 MiB (all parts but the last); 8 MiB x 10,000 parts is far above the dataset limit.
PART_BYTES = 8 * 1024 * 1024


class SplitSourceError(ValueError):
    """The source no longer reads as the validated dataset (a row without an id, or one over the line limit)."""


@dataclass(frozen=True)
class SplitFiles:
    bucket: str
    train_key: str
    eval_key: str
    train_rows: int
    eval_rows: int
    train_bytes: int
    eval_bytes: int

    @property
    def train_uri(self) -> str:
        return f"s3://{self.bucket}/{self.train_key}"

    @property
    def eval_uri(self) -> str:
        return f"s3://{self.bucket}/{self.eval_key}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "train_uri": self.train_uri,
            "eval_uri": self.eval_uri,
            "train_rows": self.train_rows,
            "eval_rows": self.eval_rows,
            "train_bytes": self.train_bytes,
            "eval_bytes": self.eval_bytes,
        }


class ObjectWriter:
    """One S3 object written from appended bytes: a single PutObject when it fits a part, else a multipart upload."""

    def __init__(self, s3: Any, *, bucket: str, key: str, part_bytes: int) -> None:
        self._s3, self._bucket, self._key, self._part_bytes = s3, bucket, key, part_bytes
        self._buffer = bytearray()
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []
        self.rows = 0
        self.bytes = 0

    def append(self, line: bytes) -> None:
        self.rows += 1
        self.write(line)

    def write(self, data: bytes) -> None:
        """Append raw bytes (not counted as rows: a copy of a stream, whatever its line breaks)."""
        self._buffer += data
        self.bytes += len(data)
        if len(self._buffer) >= self._part_bytes:
            self._upload_part()

    def _upload_part(self) -> None:
        if self._upload_id is None:
            created = self._s3.create_multipart_upload(Bucket=self._bucket, Key=self._key, ContentType=_CONTENT_TYPE)
            self._upload_id = created["UploadId"]
        number = len(self._parts) + 1
        response = self._s3.upload_part(
            Bucket=self._bucket, Key=self._key, UploadId=self._upload_id, PartNumber=number, Body=bytes(self._buffer)
        )
        self._parts.append({"PartNumber": number, "ETag": response["ETag"]})
        self._buffer.clear()

    def close(self) -> None:
        if self._upload_id is None:
            self._s3.put_object(Bucket=self._bucket, Key=self._key, Body=bytes(self._buffer), ContentType=_CONTENT_TYPE)
            return
        if self._buffer:
            self._upload_part()
        self._s3.complete_multipart_upload(
            Bucket=self._bucket, Key=self._key, UploadId=self._upload_id, MultipartUpload={"Parts": self._parts}
        )
        self._upload_id = None

    def abort(self) -> None:
        """Best effort: the bucket's lifecycle rule also aborts uploads left incomplete."""
        if self._upload_id is not None:
            with contextlib.suppress(ClientError):
                self._s3.abort_multipart_upload(Bucket=self._bucket, Key=self._key, UploadId=self._upload_id)
            self._upload_id = None


_CONTENT_TYPE = "application/jsonl"


def write_eval_split(
    s3: Any,
    *,
    bucket: str,
    key: str,
    version_id: str | None,
    eval_split: float,
    out_bucket: str,
    train_key: str,
    eval_key: str,
    max_line_bytes: int,
    part_bytes: int = PART_BYTES,
) -> SplitFiles:
    """Stream ``s3://bucket/key`` (that version) into the two split objects; call it only on a valid dataset."""
    if not 0 < eval_split < 1:
        raise ValueError(f"eval_split must be between 0 and 1 (exclusive), got {eval_split}")
    request: dict[str, Any] = {"Bucket": bucket, "Key": key}
    if version_id:
        request["VersionId"] = version_id
    body = s3.get_object(**request)["Body"]
    train = ObjectWriter(s3, bucket=out_bucket, key=train_key, part_bytes=part_bytes)
    held_out = ObjectWriter(s3, bucket=out_bucket, key=eval_key, part_bytes=part_bytes)
    try:
        for first, lines, _length, _terminated in iter_line_blocks(body, max_line_bytes=max_line_bytes):
            if lines is None:
                raise SplitSourceError(f"line {first} is over {max_line_bytes} bytes: not the validated dataset")
            for number, data in enumerate(lines, first):
                (held_out if eval_split_of(_row_id(number, data), eval_split) else train).append(data + b"\n")
        train.close()
        held_out.close()
    except BaseException:
        train.abort()
        held_out.abort()
        raise
    finally:
        body.close()
    return SplitFiles(
        bucket=out_bucket,
        train_key=train_key,
        eval_key=eval_key,
        train_rows=train.rows,
        eval_rows=held_out.rows,
        train_bytes=train.bytes,
        eval_bytes=held_out.bytes,
    )


class _IdOnly(TypedDict):
    id: str


_decode_id = msgspec.json.Decoder(_IdOnly).decode  # parses the whole line, builds only the id


def _row_id(number: int, data: bytes) -> str:
    try:
        return _decode_id(data)["id"]
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        pass  # not an ordinary row: the standard library's parse says which problem it has
    try:
        row = FAST_DECODER.decode(data.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError and JSONDecodeError are both ValueErrors
        raise SplitSourceError(f"line {number} is not a JSON row: not the validated dataset") from None
    row_id = row.get("id") if isinstance(row, dict) else None
    if not isinstance(row_id, str):
        raise SplitSourceError(f"line {number} has no string id: not the validated dataset")
    return row_id
