"""sop_support's Nova Forge package is what the SDK installs (tests/contract/test_nova_environment_package.py lists
ask_to_code and wordle; this adds the third built-in), checked with the SDK's own code in .venv-nova, and its
core scores every ticket's reference episode there (Python 3.12, the package alone on the path: fixtures, blocks
and sandbox travel with it)."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

from mtrl.envs.nova_package import build_package
from tests.contract.forked_runs import ForkServer, Run
from tests.contract.test_nova_environment_package import CHECK

ENV_ID = "sop_support"
PLAY_ALL = """
import sys
sys.path.insert(0, ".")
from environments.sop_support import make_env, solve, tickets
from mtrl.envs.contract import closing
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
