"""mtrl: multi-turn reinforcement-learning training infrastructure on AWS."""

from typing import Any

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    """``__version__`` is read from the installed metadata on first use (the lookup costs every `mtrl` start)."""
    if name != "__version__":
        raise AttributeError(f"module 'mtrl' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        found = version("mtrl")
    except PackageNotFoundError:  # running from a source tree that was not installed
        found = "0.0.0+source"
    globals()["__version__"] = found
    return found
