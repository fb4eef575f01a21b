"""The contract tier's one rule for a missing environment: skipped on a developer's machine, a failure in CI, which
builds every environment (`make test`) and never skips this tier."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def skip_or_fail(reason: str, *, module_level: bool = False) -> NoReturn:
    """Fail under CI (any non-empty ``CI``), else skip (the whole module where ``module_level``)."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI never skips the contract tier", pytrace=False)
    pytest.skip(reason, allow_module_level=module_level)
