"""Fixtures for the backend adapter tests (the doubles themselves live in aws_fakes.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from aws_fakes import REGION, FakeAws, new_session
from moto import mock_aws


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAws]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield FakeAws(new_session())
