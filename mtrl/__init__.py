"""mtrl: multi-turn reinforcement-learning training infrastructure on AWS."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mtrl")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
