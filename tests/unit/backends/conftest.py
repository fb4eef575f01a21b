"""Fixtures for the backend adapter tests (the doubles themselves live in aws_fakes.py)."""

from __future__ import annotations

import pytest
from aws_fakes import FakeAws, new_session


@pytest.fixture
def aws(mocked_aws: None) -> FakeAws:
    return FakeAws(new_session())
