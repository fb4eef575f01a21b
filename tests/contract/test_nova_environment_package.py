"""Defect 7 (issue 10): an mtrl environment packaged as the Nova Forge SDK installs a CustomEnvironment, checked with
the SDK's own code in .venv-nova (CustomEnvironment.validate, and the import the SDK's setup commands run)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from mtrl.envs.nova_package import build_package
from mtrl.envs.registry import list_environments
from tests.contract.forked_runs import ForkServer, Run

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
def test_the_package_is_what_the_sdk_installs(
    env_id: str, custom: bool, tmp_path: Path, nova_package_python: ForkServer
) -> None:
    package = build_package(env_id, custom=custom)
    assert package == build_package(env_id, custom=custom)  # deterministic: the content address is stable
    assert package.key == f"nova-envs/{env_id}/{package.sha256}.tar.gz"
    with tarfile.open(fileobj=io.BytesIO(package.archive), mode="r:gz") as tar:
        names = tar.getnames()
        assert {name.split("/", 1)[0] for name in names} == {env_id}  # package_and_upload's arcname=<env_id>
        assert f"{env_id}/pyproject.toml" in names
        tar.extractall(tmp_path, filter="data")
    # A process of its own, forked from the session's .venv-nova interpreter (tests/contract/forked_runs.py).
    result = nova_package_python.run(
        Run(
            ("-W", "ignore", "-c", CHECK, env_id, str(tmp_path / env_id)),
            env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
            cwd=str(tmp_path),
            timeout=300,
        )
    )
    assert result.stdout.strip().endswith("ok"), result.stderr[-3000:]


def test_a_bad_environment_id_is_refused() -> None:
    with pytest.raises(ValueError, match="only letters"):
        build_package("ask to code")
    with pytest.raises(ValueError, match="no package"):
        build_package("nope")
