"""Every built-in's Nova Forge package carries the blocks its core imports, and that core needs only the stdlib.

The package (``mtrl.envs.nova_package``) ships ``environments/<id>`` plus ``MTRL_MODULES``; its
``mtrl/envs/__init__.py`` is a stub. ``tests/contract/test_nova_environment_package.py`` checks what the SDK
checks (the entry module imports); it never imports ``environments.<id>`` itself, so a block missing from the
package would only fail on the reward workers. Here the extracted package is imported and its smoke episode
played by ``python -S`` (no site-packages, nothing of this checkout on the path).
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from mtrl.envs.nova_package import MTRL_MODULES, build_package
from mtrl.envs.registry import list_environments

PLAY = """
import importlib, sys
sys.path.insert(0, ".")
env_id = sys.argv[1]
module = importlib.import_module("environments." + env_id)
from mtrl.envs.rollout import run_episode
transcript, result = run_episode(module.make_env(), module.EXAMPLE_TASK, list(module.EXAMPLE_ACTIONS))
assert not result.problems(), result.problems()
leaked = [name for name in sys.modules if name.split(".")[0] not in sys.stdlib_module_names
          and name.split(".")[0] not in ("environments", "mtrl", "__main__")]
assert not leaked, leaked
assert all(not m.__file__ or m.__file__.startswith(".") or "site-packages" not in m.__file__
           for m in list(sys.modules.values()) if getattr(m, "__file__", None)), "site-packages used"
print("ok", result.reward)
"""

BUILTINS = [env_id for env_id, source in list_environments() if source == "builtin"]


def test_the_blocks_are_in_the_package() -> None:
    for block in ("tools", "episode_state", "execution", "scoring", "normalise"):
        assert f"mtrl/envs/{block}.py" in MTRL_MODULES
    assert "mtrl/health/signal_health.py" in MTRL_MODULES  # scoring reuses it


@pytest.mark.parametrize("env_id", BUILTINS)
def test_the_packaged_core_plays_its_smoke_episode_with_the_stdlib_only(env_id: str, tmp_path: Path) -> None:
    package = build_package(env_id)
    with tarfile.open(fileobj=io.BytesIO(package.archive), mode="r:gz") as tar:
        tar.extractall(tmp_path, filter="data")
    result = subprocess.run(
        [sys.executable, "-S", "-c", PLAY, env_id],
        capture_output=True,
        text=True,
        cwd=tmp_path / env_id,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        check=False,
        timeout=300,
    )
    assert result.stdout.startswith("ok"), result.stderr[-3000:]
