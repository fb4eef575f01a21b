"""The contract tier's rule for a missing environment (tests/contract/tier.py)."""

from __future__ import annotations

import pytest

from tests.contract.tier import skip_or_fail


def test_a_missing_environment_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"\.venv-x is missing; CI never skips the contract tier"):
        skip_or_fail(".venv-x is missing")


def test_a_missing_environment_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"\.venv-x is missing"):
        skip_or_fail(".venv-x is missing")
