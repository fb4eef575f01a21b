"""Small AWS helpers shared by the backend adapters: cached clients, ARNs, S3 URIs, error classification."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from mtrl.contracts.backend import BackendError

# Error codes that mean "try again later", never "your request is wrong".
_TRANSIENT_CODES = {
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "ProvisionedThroughputExceededException",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "InternalFailure",
    "InternalServerError",
    "InternalServerException",
    "InternalError",
    "ServerException",
}


class AwsClients:
    """boto3 clients per (service, region), created once; tests pass a session whose events carry fakes."""

    def __init__(self, session: boto3.Session | None = None) -> None:
        self._session = session or boto3.Session()
        self._cache: dict[tuple[str, str, int | None], Any] = {}

    @property
    def session(self) -> boto3.Session:
        """The session the clients come from (what signs a presigned EKS token)."""
        return self._session

    def client(self, service: str, region: str, *, read_timeout: int | None = None) -> Any:
        key = (service, region, read_timeout)
        if key not in self._cache:
            config = Config(retries={"mode": "standard", "max_attempts": 5})
            if read_timeout is not None:
                # A bounded call (the smoke test): no retries, or a 30 s timeout would become minutes.
                config = Config(read_timeout=read_timeout, connect_timeout=10, retries={"max_attempts": 1})
            self._cache[key] = self._session.client(service, region_name=region, config=config)
        return self._cache[key]


@dataclass(frozen=True)
class Arn:
    partition: str
    service: str
    region: str
    account: str
    resource: str

    @classmethod
    def parse(cls, arn: str) -> Arn:
        parts = arn.split(":", 5)
        if len(parts) != 6 or parts[0] != "arn":
            raise ValueError(f"not an ARN: '{arn}'")
        return cls(parts[1], parts[2], parts[3], parts[4], parts[5])


@dataclass(frozen=True)
class S3Uri:
    bucket: str
    key: str

    @classmethod
    def parse(cls, uri: str) -> S3Uri:
        match = re.fullmatch(r"s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])/?(.*)", uri)
        if not match:
            raise ValueError(f"not an s3://bucket/key URI: '{uri}'")
        return cls(match.group(1), match.group(2))

    def join(self, *parts: str) -> S3Uri:
        key = "/".join([self.key.rstrip("/"), *(part.strip("/") for part in parts)]).lstrip("/")
        trailing = "/" if parts and parts[-1].endswith("/") else ""  # a prefix stays a prefix
        return S3Uri(self.bucket, key + trailing)

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def error_message(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Message", ""))


def is_transient(error: Exception) -> bool:
    if isinstance(error, ClientError):
        status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        return error_code(error) in _TRANSIENT_CODES or status >= 500
    return isinstance(error, BotoCoreError)  # connection resets, endpoint timeouts


def backend_error(action: str, error: Exception) -> BackendError:
    """Turn an AWS error into a plain-words BackendError, transient only for throttling/service faults."""
    detail = f"{error_code(error)}: {error_message(error)}" if isinstance(error, ClientError) else str(error)
    return BackendError(f"{action} failed — {detail}", transient=is_transient(error))


def short_token(value: str, length: int = 10) -> str:
    """A stable short hash, for names with tight length limits (ECS startedBy, job names)."""
    return hashlib.sha256(value.encode()).hexdigest()[:length]


def safe_name(value: str, *, max_length: int, prefix: str = "") -> str:
    """``[a-zA-Z0-9-]`` name, no leading/trailing/double hyphen, ≤ max_length; hashed suffix when shortened."""
    cleaned = re.sub(r"-{2,}", "-", re.sub(r"[^a-zA-Z0-9-]", "-", f"{prefix}{value}")).strip("-")
    if len(cleaned) <= max_length:
        return cleaned
    suffix = short_token(value, 8)
    return f"{cleaned[: max_length - len(suffix) - 1].rstrip('-')}-{suffix}"


def iter_s3_lines(s3: Any, uri: S3Uri) -> Iterator[bytes]:
    """Stream an object's lines without loading it whole."""
    body = s3.get_object(Bucket=uri.bucket, Key=uri.key)["Body"]
    try:
        yield from body.iter_lines()
    finally:
        body.close()
