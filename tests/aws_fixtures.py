"""moto for the tests: one fake identity, no user configuration, and moto's in-memory AWS.

Tests take the fixtures of tests/conftest.py (``aws_credentials``, ``mocked_aws``); the functions here are for what a
fixture cannot reach: a region or account of its own (``fake_aws``), a module- or process-wide set-up without
monkeypatch (``fake_credentials_in_environ``), an interpreter a test starts (``fake_credentials``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import pytest

REGION = "us-east-1"

# What could send a test's calls to a real profile or a live endpoint instead of moto.
USER_CONFIGURATION = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL")


def fake_credentials(region: str = REGION) -> dict[str, str]:
    """The environment of the fake identity: keys no real account accepts, and the region."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
    }


def use_fake_credentials(monkeypatch: pytest.MonkeyPatch, *, region: str = REGION) -> None:
    for name in USER_CONFIGURATION:
        monkeypatch.delenv(name, raising=False)
    for name, value in fake_credentials(region).items():
        monkeypatch.setenv(name, value)


@contextlib.contextmanager
def fake_aws(monkeypatch: pytest.MonkeyPatch, *, region: str = REGION, account: str | None = None) -> Iterator[None]:
    """moto under the fake identity; ``account`` is the account moto answers in (so ARNs can match a synthesized
    app's), else moto's default."""
    use_fake_credentials(monkeypatch, region=region)
    from moto import mock_aws  # here: the files that only need the credentials never load moto

    if account is not None:
        monkeypatch.setenv("MOTO_ACCOUNT_ID", account)
    with mock_aws():
        yield


@contextlib.contextmanager
def fake_credentials_in_environ(region: str = REGION) -> Iterator[None]:
    """``use_fake_credentials`` where no monkeypatch reaches (a module-scoped fixture): the whole environment is put
    back after, whatever the block changed."""
    saved = dict(os.environ)
    for name in USER_CONFIGURATION:
        os.environ.pop(name, None)
    os.environ.update(fake_credentials(region))
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def create_versioned_bucket(s3: Any, name: str) -> None:
    """A bucket with versioning on, as the data stack deploys it (uploads answer a VersionId)."""
    s3.create_bucket(Bucket=name)
    s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
