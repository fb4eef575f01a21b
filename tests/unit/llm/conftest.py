"""Language-model policy tests: the tiny random model, a template-made environment in a scratch project root."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mtrl.envs.registry import project_root

pytest.importorskip("torch", reason="the mtrl[llm] extra (make test installs it)")

# A stand-in for what a user gets with `cp -r custom-environments/template custom-environments/my_env`.
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
