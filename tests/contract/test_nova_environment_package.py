"""Defect 7 (issue 10): an mtrl environment packaged as the Nova Forge SDK installs a CustomEnvironment, checked with
the SDK's own code in .venv-nova (CustomEnvironment.validate, and the import the SDK's setup commands run). And
sop_support's core scores every ticket's reference episode there (Python 3.12, the package alone on the path:
fixtures, blocks and sandbox travel with it). Every check is a fork of one .venv-nova interpreter (conftest
``nova_package_python``), so the module's checks share its start-up."""

from __future__ import annotations

import io
import os
import subprocess
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


ENV_ID = "sop_support"
PLAY_ALL = """
import sys
sys.path.insert(0, ".")
from environments.sop_support import make_env, solve, tickets
from mtrl.contracts.environment import closing
from mtrl.envs.rollout import run_episode
for ticket_id in tickets():
    with closing(make_env()) as env:
        _, result = run_episode(env, {"prompt": "", "info": {"ticket_id": ticket_id}}, list(solve(ticket_id).actions))
    assert (result.reward, result.evaluation) == (1.0, 1.0), (ticket_id, result)
print("ok", len(tickets()))
"""


def _run(python: ForkServer, code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -W ignore -c <code> <args>`` of .venv-nova in ``cwd``: a process of its own, forked from the session's
    interpreter (tests/contract/forked_runs.py)."""
    return python.run(
        Run(("-W", "ignore", "-c", code, *args), env={"PATH": os.environ["PATH"], "HOME": str(cwd)}, cwd=str(cwd))
    )


def test_the_sop_support_package_is_what_the_sdk_installs_and_scores_every_ticket(
    tmp_path: Path, nova_package_python: ForkServer
) -> None:
    python = nova_package_python
    package = build_package(ENV_ID)
    assert package == build_package(ENV_ID)
    with tarfile.open(fileobj=io.BytesIO(package.archive), mode="r:gz") as tar:
        names = set(tar.getnames())
        tar.extractall(tmp_path, filter="data")
    for fixture in ("customers.csv", "order_history.jsonl", "shipments.csv", "policies.csv", "tickets.csv"):
        assert f"{ENV_ID}/environments/{ENV_ID}/fixtures/{fixture}" in names
    root = tmp_path / ENV_ID
    checked = _run(python, CHECK, ENV_ID, str(root), cwd=tmp_path)
    assert checked.stdout.strip().endswith("ok"), checked.stderr[-3000:]
    played = _run(python, PLAY_ALL, cwd=root)
    assert played.stdout.strip() == "ok 54", played.stderr[-3000:]
