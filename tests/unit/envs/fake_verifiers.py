"""A minimal stand-in for the ``verifiers`` API the adapter targets (``verifiers`` itself is not installed here: the
Nova Forge worker ships its own fork): ``MultiTurnEnv`` keeps its keyword arguments, ``Rubric`` its functions and
weights."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest


class FakeMultiTurnEnv:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


class FakeRubric:
    def __init__(self, funcs: list[Any], weights: list[float]) -> None:
        self.funcs = funcs
        self.weights = weights


def install_fake_verifiers(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """Put the stand-in in ``sys.modules`` as ``verifiers`` for one test."""
    module = types.ModuleType("verifiers")
    module.MultiTurnEnv = FakeMultiTurnEnv  # type: ignore[attr-defined]
    module.Rubric = FakeRubric  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "verifiers", module)
    return module
