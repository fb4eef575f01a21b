"""Language-model policy tests: the tiny random model, a template-made environment in a scratch project root."""

from __future__ import annotations

import pytest

from tests.made_env import MADE_ENV, made_env_root  # noqa: F401  (the fixture, for this folder's tests)

pytest.importorskip("torch", reason="the mtrl[llm] extra (make test installs it)")
