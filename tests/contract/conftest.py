"""Contract-tier fixtures: the whole app synthesized once per session as an IAM model (see iam_contract.py)."""

from __future__ import annotations

import pytest

from tests.contract.iam_contract import AppModel


@pytest.fixture(scope="session")
def app_model() -> AppModel:
    return AppModel.synth()
