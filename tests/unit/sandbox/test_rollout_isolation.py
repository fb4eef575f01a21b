"""One rollout cannot change another's reward: hostile members of a GRPO group of 8, played by the real
WorkerRuntime with concurrency 4 (the reward worker's default), leave the others scoring exactly what each
scores alone — in every tier, forced from this process and as CI runs each tier (issue 23).

As CI runs them: the fargate tier as root without CAP_SYS_ADMIN (``setpriv``); the lambda tier as ``mtrl-ci``
under a small process limit (a Lambda-sized limit scaled to this group: fewer slots than four hostile rollouts
could take at their own limits), where four hostile rollouts once made the others fail with reward 0.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

import pytest

from mtrl.sandbox import Limits
from tests.unit.sandbox.grpo_group import alone_and_together
from tests.unit.sandbox.reachable_python import CI_USER, REACHABLE, ci_user_exists, needs_ci_user

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="forcing every tier needs root (as in CI)")
LIMITS = {"timeout_s": 4.0, "cpu_s": 2, "memory_mb": 256, "max_processes": 16}
CONCURRENCY = 4
PROBE = r"""
import json, os, resource, sys
document = json.loads(sys.stdin.read())
sys.path.insert(0, document["project"])
from mtrl.sandbox import Limits
from mtrl.sandbox.tiers import tasks_of_uid
if document["nproc_headroom"]:  # the worker's own process limit, as Lambda sets one for the function
    limit = tasks_of_uid(os.getuid()) + document["nproc_headroom"]
    resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
from tests.unit.sandbox.grpo_group import alone_and_together
outcome = alone_and_together(document["hostile"], Limits(**document["limits"]), document["concurrency"], os.getpid())
print(json.dumps(outcome))
"""


def unchanged(outcome: dict[str, Any]) -> None:
    alone, group = outcome["alone"], outcome["group"]
    assert len(group) == 8
    assert all(status == "completed" for status, *_ in group.values()), group
    assert {tag: group[tag] for tag in alone} == alone
    assert alone["r0"][2] == 1.0  # the reference solution passes every hidden case: the tier really runs code
    assert len({reward for _, reward, *_ in alone.values()}) > 2  # the group does discriminate
    best = max(reward for _, reward, *_ in alone.values())
    assert all(result[1] < best for tag, result in group.items() if tag.startswith("h"))


@pytest.mark.parametrize("tier", ["full", "fargate", "lambda"])
def test_a_hostile_rollout_does_not_change_its_group_mates_rewards(tier: str) -> None:
    limits = Limits(**LIMITS, isolation=tier)  # type: ignore[arg-type]
    unchanged(alone_and_together(1, limits, CONCURRENCY, os.getpid()))


def probe(prefix: list[str], *, hostile: int, nproc_headroom: int = 0) -> dict[str, Any]:
    document = {
        "project": str(REACHABLE.project),
        "hostile": hostile,
        "limits": LIMITS,
        "concurrency": CONCURRENCY,
        "nproc_headroom": nproc_headroom,
    }
    completed = subprocess.run(
        [*prefix, REACHABLE.executable, "-I", "-c", PROBE],
        input=json.dumps(document),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    outcome: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return outcome


@pytest.mark.other_uids
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux; .ci/run installs it)")
def test_four_hostile_rollouts_in_the_fargate_tier_as_ci_runs_it() -> None:
    unchanged(probe(["setpriv", "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin", "--"], hostile=4))


@pytest.mark.other_uids
@needs_ci_user
@pytest.mark.skipif(shutil.which("runuser") is None, reason="needs runuser (util-linux; .ci/run installs it)")
def test_four_hostile_rollouts_under_a_process_limit_in_the_lambda_tier_as_ci_runs_it() -> None:
    assert ci_user_exists(), f"{CI_USER} is missing: .ci/run must create it"
    # 48 slots: fewer than the 4 x (16 + 1) four hostile rollouts could take at their own limits.
    unchanged(probe(["runuser", "-u", CI_USER, "--"], hostile=4, nproc_headroom=48))
