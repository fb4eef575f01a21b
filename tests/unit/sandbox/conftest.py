"""Sandbox tests that run code as other uids get an interpreter those uids can reach, or are skipped saying how.

Such a test is one marked ``other_uids`` or parametrized with ``tier="fargate"`` (its throwaway uids). The copy
is made at most once per test process, only when this process's interpreter is out of their reach
(``reachable_python``), and removed when the session ends. Nothing ever fails for that reason alone.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.sandbox.reachable_python import REACHABLE

HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "other_uids: runs sandboxed code as uids other than this process's own")


def _needs_other_uids(item: pytest.Item) -> bool:
    if HERE not in Path(str(item.fspath)).resolve().parents:
        return False
    callspec = getattr(item, "callspec", None)
    return item.get_closest_marker("other_uids") is not None or (
        callspec is not None and callspec.params.get("tier") == "fargate"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    needing = [item for item in items if _needs_other_uids(item)]
    if not needing or os.geteuid() != 0:  # without root these tests skip anyway (they start from root, as CI)
        return
    problem = REACHABLE.ensure()
    if problem:
        for item in needing:
            item.add_marker(pytest.mark.skip(reason=problem))


def pytest_unconfigure(config: pytest.Config) -> None:
    REACHABLE.remove()
