"""A package's names imported from their modules on first use (PEP 562 module ``__getattr__``), so that importing
the package for one name does not load every module behind the others (command start-up: docs/development.md)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, namespace: dict[str, Any], module_of: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: a name of ``module_of`` is imported from its module once and kept in the
    package's ``namespace`` (its ``globals()``); any other name is an AttributeError, as for a plain module."""

    def __getattr__(name: str) -> Any:
        if name not in module_of:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module_of[name]), name)
        namespace[name] = value
        return value

    return __getattr__
