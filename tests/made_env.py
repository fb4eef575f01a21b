"""A project root holding the built-in environments and one made from the template, as a user makes it
(``cp -r custom-environments/template custom-environments/my_env``): the language-model policy tests (tests/unit/llm)
and the commands that run them (tests/unit/cli) share it through their conftests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mtrl.envs.registry import project_root

MADE_ENV = "my_env"


@pytest.fixture
def made_env_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project root holding the built-ins and a fresh environment copied from the template (ENV_ID changed)."""
    source = project_root()
    root = tmp_path / "project"
    (root / "custom-environments").mkdir(parents=True)
    (root / "environments").symlink_to(source / "environments")
    target = root / "custom-environments" / MADE_ENV
    shutil.copytree(source / "custom-environments" / "template", target, ignore=shutil.ignore_patterns("__pycache__"))
    init = target / "__init__.py"
    init.write_text(init.read_text().replace('ENV_ID = "template"', f'ENV_ID = "{MADE_ENV}"'))
    monkeypatch.setenv("MTRL_PROJECT_ROOT", str(root))
    return root
