"""The commands' tests: the template-made project root the language-model commands run on (tests/made_env.py)."""

from __future__ import annotations

from tests.made_env import made_env_root  # noqa: F401  (the fixture, for this folder's tests)
