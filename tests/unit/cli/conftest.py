"""The commands' tests: the template-made project root the language-model commands run on (tests/made_env.py), and
the deployment in moto the remote commands talk to (tests/unit/client/conftest.py)."""

from __future__ import annotations

from tests.made_env import made_env_root  # noqa: F401  (the fixture, for this folder's tests)
from tests.unit.client.conftest import aws_env, fake  # noqa: F401  (the moto deployment, for this folder's tests)
