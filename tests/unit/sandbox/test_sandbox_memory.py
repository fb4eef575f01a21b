"""A run's total memory is bounded in the tiers without a memory cgroup too (issue 38 item 8): a program that forks
children which each stay under the per-process ``memory_mb`` (RLIMIT_AS) but together hold several times it is
killed as a whole once the run's resident total passes ``memory_mb`` (``mtrl.sandbox.memory``), as the full tier's
cgroup does. Before, six children held about 1.8 GiB together under a 512 MiB limit."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from mtrl.sandbox import Limits, SandboxUnavailableError, run_cases, run_code
from mtrl.sandbox.judge import Case, Check
from mtrl.sandbox.memory import session_rss_bytes

FORKING = """
import os, time
children = []
for _ in range({children}):
    pid = os.fork()
    if pid == 0:
        block = bytearray({mib} * 1024 * 1024)
        for offset in range(0, len(block), 4096):
            block[offset] = 1
        time.sleep(8)
        os._exit(0)
    children.append(pid)
for pid in children:
    _, status = os.waitpid(pid, 0)
    assert status == 0, status
def f():
    return 1
"""


def _limits(tier: str) -> Limits:
    return Limits(timeout_s=30, cpu_s=20, memory_mb=512, max_processes=16, isolation=tier)  # type: ignore[arg-type]


@pytest.mark.parametrize("tier", ["fargate"])
@pytest.mark.parametrize(("children", "mib"), [(6, 300), (3, 250), (12, 100)])
def test_children_that_together_hold_more_than_memory_mb_end_the_run(tier: str, children: int, mib: int) -> None:
    program = FORKING.format(children=children, mib=mib)
    started = time.monotonic()
    try:
        by_code = run_code(program, limits=_limits(tier))
        by_cases = run_cases(program, [Case("c", (Check("f", (), 1),))], _limits(tier))
    except SandboxUnavailableError as error:  # pragma: no cover - depends on the host
        pytest.skip(str(error))
    for result in (by_code, by_cases):
        assert result.status == "failed", (result.status, result.detail, result.stderr[-500:])
        assert result.detail.startswith("memory: the run held"), result.detail
        assert "over 512 MiB" in result.detail
        assert "run-memory" in result.isolation
    assert by_cases.tests_passed == 0
    assert time.monotonic() - started < 2 * 8  # killed, not left to sleep out its 8 s per run


@pytest.mark.parametrize("tier", ["fargate"])
def test_a_run_within_its_memory_is_not_killed(tier: str) -> None:
    program = FORKING.format(children=2, mib=100)
    try:
        result = run_cases(program, [Case("c", (Check("f", (), 1),))], _limits(tier))
    except SandboxUnavailableError as error:  # pragma: no cover - depends on the host
        pytest.skip(str(error))
    assert result.status == "passed", (result.detail, result.stderr[-500:])


def test_the_session_total_counts_every_process_of_the_session() -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "b = bytearray(64 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nimport time\n"
            "print('ready', flush=True)\ntime.sleep(30)",
        ],
        start_new_session=True,
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        assert session_rss_bytes(child.pid) >= 64 << 20
        assert session_rss_bytes(child.pid + 10_000_000) == 0  # no such session
    finally:
        child.kill()
        child.wait()
