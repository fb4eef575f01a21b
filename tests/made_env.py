"""A project root holding the built-in environments and one made from the template, as a user makes it
(``cp -r custom-environments/template custom-environments/my_env``): the language-model policy tests (tests/unit/llm)
and the commands that run them (tests/unit/cli) share it through their conftests."""

from __future__ import annotations

import json
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


def add_train_row_to_eval(root: Path) -> str:
    """Copy the made environment's first training row into its sample eval.jsonl under a new id: the train/eval
    overlap the pipeline's Validate refuses (issue 38 item 13). Returns the overlapping eval line's text."""
    sample = root / "custom-environments" / MADE_ENV / "sample"
    first = json.loads((sample / "train.jsonl").read_text().splitlines()[0])
    copied = json.dumps({**first, "id": "eval-copy"})
    with (sample / "eval.jsonl").open("a", encoding="utf-8") as stream:
        stream.write(copied + "\n")
    return copied
