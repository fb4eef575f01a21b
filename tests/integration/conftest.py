"""Fixtures of the pipeline tests that run against the local test-double adapter (see ``pipeline_support``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.pipeline_support import FakeAdapter, Harness, running_pipeline


@pytest.fixture
def adapter() -> FakeAdapter:
    """The adapter ``pipeline`` runs with; a test configures it before its first upload."""
    return FakeAdapter()


@pytest.fixture
def pipeline(adapter: FakeAdapter) -> Iterator[Harness]:
    yield from running_pipeline(adapter)
