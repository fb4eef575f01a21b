"""The one place backends are registered: name → descriptor (``mtrl.contracts.descriptor``).

The built-ins are listed by where their descriptor lives, and a descriptor module is imported only when that backend
is asked about, so a Lambda or a CLI command loads only the backend it uses. A platform team adds its own backend with
``register_backend(descriptor)`` (before the pipeline's handlers run: in the function's package) — a package plus one
call. Registering a built-in's name replaces it.
"""

from __future__ import annotations

import importlib

from mtrl.contracts.descriptor import BackendDescriptor

BUILTIN_BACKENDS: dict[str, str] = {
    "verl": "mtrl.backends.verl.descriptor:DESCRIPTOR",
    "hyperpod": "mtrl.backends.hyperpod.descriptor:DESCRIPTOR",
    "serverless": "mtrl.backends.serverless.descriptor:DESCRIPTOR",
    "local": "mtrl.backends.local_descriptor:DESCRIPTOR",
    "sessions": "mtrl.backends.sessions.descriptor:DESCRIPTOR",
}

_registered: dict[str, BackendDescriptor] = {}
_loaded: dict[str, BackendDescriptor] = {}


class UnknownBackendError(ValueError):
    """A backend name nothing registered (the message lists the registered ones)."""


def register_backend(descriptor: BackendDescriptor) -> None:
    """Make ``descriptor.name`` a backend runs may choose (replaces a built-in of that name)."""
    if not isinstance(descriptor, BackendDescriptor):
        raise TypeError(f"register_backend takes a BackendDescriptor, not {type(descriptor).__name__}")
    _registered[descriptor.name] = descriptor


def unregister_backend(name: str) -> None:
    """Forget a registered backend (a built-in of that name is used again)."""
    _registered.pop(name, None)


def backend_names() -> tuple[str, ...]:
    """Every backend a run may choose: the built-ins, then the registered ones, in order."""
    return tuple(dict.fromkeys([*BUILTIN_BACKENDS, *_registered]))


def check_backend_name(name: str) -> str:
    """``name`` if a backend of that name is registered, else UnknownBackendError (imports nothing)."""
    if name in _registered or name in BUILTIN_BACKENDS:
        return name
    raise UnknownBackendError(f"unknown backend '{name}' (registered backends: {', '.join(backend_names())})")


def descriptor_for(name: str) -> BackendDescriptor:
    """The backend's descriptor (UnknownBackendError for a name nothing registered)."""
    registered = _registered.get(name)
    if registered is not None:
        return registered
    check_backend_name(name)
    descriptor = _loaded.get(name)
    if descriptor is None:
        module_name, _, attribute = BUILTIN_BACKENDS[name].partition(":")
        descriptor = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(descriptor, BackendDescriptor) or descriptor.name != name:
            raise TypeError(f"{BUILTIN_BACKENDS[name]} is not the BackendDescriptor of backend '{name}'")
        _loaded[name] = descriptor
    return descriptor
