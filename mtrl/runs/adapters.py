"""Backend selection: backend name → adapter factory (the only place the pipeline branches on backend).

Adapters live in ``mtrl.backends.<name>`` and are imported lazily, so a Lambda only loads the backend it
uses. Tests (and platform teams with their own backend) register a factory under a name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from mtrl.backends.base import BackendAdapter
from mtrl.runs.errors import ConfigurationError

AdapterFactory = Callable[[], BackendAdapter]

# name → "module:attribute" of a zero-argument factory (usually the adapter class).
BUILTIN_ADAPTERS: dict[str, str] = {
    "hyperpod": "mtrl.backends.hyperpod:HyperPodAdapter",
    "serverless": "mtrl.backends.serverless.adapter:ServerlessAdapter",
    "local": "mtrl.backends.local:LocalAdapter",
    "verl": "mtrl.backends.verl.adapter:VerlAdapter",
}

# name → "module:attribute" of ``(deploy settings, run settings, run) -> [Kubernetes objects]``: what ``mtrl render``
# prints for a backend that submits Kubernetes objects (backends not listed submit none).
BUILTIN_RENDERERS: dict[str, str] = {"verl": "mtrl.backends.verl.offline:render_run"}

_registered: dict[str, AdapterFactory] = {}


def register_adapter(name: str, factory: AdapterFactory) -> None:
    """Use ``factory`` for backend ``name`` (overrides a built-in)."""
    _registered[name] = factory


def unregister_adapter(name: str) -> None:
    _registered.pop(name, None)


def adapter_for(name: str) -> BackendAdapter:
    factory = _registered.get(name)
    if factory is None:
        target = BUILTIN_ADAPTERS.get(name)
        if target is None:
            known = ", ".join(sorted({*BUILTIN_ADAPTERS, *_registered}))
            raise ConfigurationError(f"unknown backend '{name}' (known: {known})")
        module_name, _, attribute = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            raise ConfigurationError(f"backend '{name}' is not available in this deployment ({error})") from None
        factory = getattr(module, attribute)
    return factory()


def renderer_for(name: str) -> Callable[..., list[dict[str, Any]]] | None:
    """The backend's offline renderer of the Kubernetes objects a run submits (None: it submits none)."""
    target = BUILTIN_RENDERERS.get(name)
    if target is None:
        return None
    module_name, _, attribute = target.partition(":")
    renderer: Callable[..., list[dict[str, Any]]] = getattr(importlib.import_module(module_name), attribute)
    return renderer
