"""Backend selection: backend name → adapter (the descriptor's factory, ``mtrl.contracts.registry``).

Adapters live in ``mtrl.backends.<name>`` and are imported lazily, so a Lambda only loads the backend it
uses. A new backend is registered with ``mtrl.contracts.registry.register_backend``; tests may also replace one
backend's adapter factory under its name (``register_adapter``) and keep everything else its descriptor says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mtrl.contracts.backend import BackendAdapter
from mtrl.contracts.descriptor import BackendDescriptor, resolve
from mtrl.contracts.errors import ConfigurationError
from mtrl.contracts.registry import UnknownBackendError, descriptor_for

AdapterFactory = Callable[[], BackendAdapter]

_registered: dict[str, AdapterFactory] = {}


def register_adapter(name: str, factory: AdapterFactory) -> None:
    """Use ``factory`` for backend ``name``'s adapter (overrides its descriptor's)."""
    _registered[name] = factory


def unregister_adapter(name: str) -> None:
    _registered.pop(name, None)


def _descriptor(name: str) -> BackendDescriptor:
    try:
        return descriptor_for(name)
    except UnknownBackendError as error:
        raise ConfigurationError(str(error)) from None
    except ModuleNotFoundError as error:
        raise ConfigurationError(f"backend '{name}' is not available in this deployment ({error})") from None


def adapter_for(name: str) -> BackendAdapter:
    factory = _registered.get(name)
    if factory is None:
        target = _descriptor(name).adapter
        try:
            factory = resolve(target)
        except ModuleNotFoundError as error:
            raise ConfigurationError(f"backend '{name}' is not available in this deployment ({error})") from None
    return factory()


def renderer_for(name: str) -> Callable[..., list[dict[str, Any]]] | None:
    """The backend's offline renderer of the Kubernetes objects a run submits (None: it submits none)."""
    target = _descriptor(name).renderer
    if target is None:
        return None
    renderer: Callable[..., list[dict[str, Any]]] = resolve(target)
    return renderer
