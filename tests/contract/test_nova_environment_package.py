"""Defect 7 (issue 10): an mtrl environment packaged as the Nova Forge SDK installs a CustomEnvironment, checked with
the SDK's own code in .venv-nova (CustomEnvironment.validate, and the import the SDK's setup commands run)."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from mtrl.envs.nova_package import build_package
from mtrl.envs.registry import list_environments

ROOT = Path(__file__).resolve().parents[2]
NOVA_PYTHON = ROOT / ".venv-nova" / "bin" / "python"

CHECK = """
import sys, importlib
from amzn_nova_forge.rft_multiturn import CustomEnvironment
env_id, path = sys.argv[1], sys.argv[2]
env = CustomEnvironment(env_id=env_id, local_path=path, env_type="multi_turn")
assert env.validate() is True
sys.path.insert(0, path)  # what `pip install -e ./<env_id>` puts on the path
module = importlib.import_module(env_id.replace("-", "_"))  # the SDK's check: python -c "import <module>"
assert callable(module.load_environment)
print("ok")
"""


# Every built-in the stack packages (stacks/backends_stack.enabled_environments), plus the custom template.
PACKAGED = [(env_id, False) for env_id, source in list_environments() if source == "builtin"] + [("template", True)]


@pytest.mark.parametrize(("env_id", "custom"), PACKAGED)
def test_the_package_is_what_the_sdk_installs(env_id: str, custom: bool, tmp_path: Path) -> None:
    if not NOVA_PYTHON.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(".venv-nova is missing; CI never skips the contract tier")
        pytest.skip(".venv-nova is missing: make nova")
    package = build_package(env_id, custom=custom)
    assert package == build_package(env_id, custom=custom)  # deterministic: the content address is stable
    assert package.key == f"nova-envs/{env_id}/{package.sha256}.tar.gz"
    with tarfile.open(fileobj=io.BytesIO(package.archive), mode="r:gz") as tar:
        names = tar.getnames()
        assert {name.split("/", 1)[0] for name in names} == {env_id}  # package_and_upload's arcname=<env_id>
        assert f"{env_id}/pyproject.toml" in names
        tar.extractall(tmp_path, filter="data")
    result = subprocess.run(
        [str(NOVA_PYTHON), "-W", "ignore", "-c", CHECK, env_id, str(tmp_path / env_id)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
        check=False,
        timeout=300,
    )
    assert result.stdout.strip().endswith("ok"), result.stderr[-3000:]


def test_a_bad_environment_id_is_refused() -> None:
    with pytest.raises(ValueError, match="only letters"):
        build_package("ask to code")
    with pytest.raises(ValueError, match="no package"):
        build_package("nope")
