"""Nothing a run starts outlives it — also when it is stopped at its deadline — and it dies first under memory
pressure; the work directory goes even when the code's owner made it unreadable (issue 23 §3, §4, §6)."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from mtrl.sandbox import Limits, run_code
from tests.unit.sandbox.hostile import processes
from tests.unit.sandbox.reachable_python import REACHABLE

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="forcing every tier needs root (as in CI)")
TIERS = ("full", "fargate", "lambda")

# Prints its process group, then leaves children of every kind and never ends: the deadline must stop it.
STUBBORN = r"""
import ctypes, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
print(os.getpgrp(), flush=True)
for _ in range(4):
    try:
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            if os.fork() == 0:  # a grandchild, orphaned as soon as its parent exits
                time.sleep(60)
            os._exit(0)
    except OSError:
        pass
libc.syscall(56 if os.uname().machine == "x86_64" else 220, 0x8000 | 17, 0, 0, 0, 0)  # CLONE_PARENT
signal.signal(signal.SIGTERM, signal.SIG_IGN)
while True:
    pass
"""


def descendants(root: int) -> list[int]:
    table = processes()
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, (_, ppid, _, _) in table.items() if ppid == parent]
        found += children
        frontier += children
    return found


@pytest.mark.parametrize("tier", TIERS)
def test_a_run_stopped_at_its_deadline_leaves_nothing(tier: str) -> None:
    worker = os.getpid()
    zombies_before = {pid for pid, (state, ppid, _, _) in processes().items() if ppid == worker and state == "Z"}
    result = run_code(STUBBORN, limits=Limits(timeout_s=1.5, cpu_s=10, isolation=tier))  # type: ignore[arg-type]
    assert result.status == "timeout"
    group = int(result.stdout.split()[0])
    table = processes()
    assert [pid for pid, (state, _, pgid, _) in table.items() if pgid == group and state not in "ZX"] == []
    assert [pid for pid, (state, ppid, _, _) in table.items() if ppid == worker and state == "Z"] == sorted(
        zombies_before
    )
    if result.uid is not None:
        assert [pid for pid, (_, _, _, uid) in table.items() if uid == result.uid] == []


@pytest.mark.parametrize("tier", TIERS)
def test_sandboxed_processes_are_the_oom_killers_first_choice(tier: str) -> None:
    """Outside the full tier memory is limited per process only: under the task's memory limit the kernel
    kills sandboxed code (oom_score_adj 1000) before the worker."""
    seen: dict[int, str] = {}
    done = threading.Event()
    before = set(descendants(os.getpid()))

    def watch() -> None:
        while not done.is_set():
            for pid in set(descendants(os.getpid())) - before:
                with contextlib.suppress(OSError):
                    seen[pid] = Path(f"/proc/{pid}/oom_score_adj").read_text().strip()
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        program = "import os, time\ntry:\n    if os.fork() == 0:\n        time.sleep(1.2)\n        os._exit(0)\n"
        program += "except OSError:\n    pass\ntime.sleep(1.2)\n"  # (code that keeps uid 0 may not fork)
        result = run_code(program, limits=Limits(timeout_s=10, isolation=tier))  # type: ignore[arg-type]
    finally:
        done.set()
        watcher.join()
    assert result.status == "passed", result.stderr
    assert len(seen) >= (2 if "threads-only" in result.isolation else 3), seen  # reaper (or PID 1), program, child
    assert set(seen.values()) == {"1000"}, seen


@pytest.mark.other_uids
def test_a_tree_its_owner_made_unreadable_is_still_removed() -> None:
    """§4: as an unprivileged owner (no CAP_DAC_OVERRIDE), a directory chain chmod'ed to 0 is deleted."""
    owner = pwd.getpwnam("nobody")
    base = Path(tempfile.mkdtemp(prefix="mtrl-remove-tree-"))
    try:
        os.chown(base, owner.pw_uid, owner.pw_gid)
        script = (
            "import json, os, sys\n"
            f"sys.path.insert(0, {str(REACHABLE.project)!r})\n"
            "from mtrl.sandbox.tiers import remove_tree\n"
            f"top = os.path.join({str(base)!r}, 'tree')\n"
            "os.makedirs(os.path.join(top, 'a', 'b', 'c'))\n"
            "open(os.path.join(top, 'a', 'b', 'c', 'f'), 'w').write('x')\n"
            "os.symlink('/etc', os.path.join(top, 'a', 'link'))\n"
            "for path in ('a/b/c', 'a/b', 'a', ''):\n"
            "    os.chmod(os.path.join(top, path), 0)\n"
            "print(json.dumps([os.getuid(), remove_tree(top), os.path.lexists(top)]))\n"
        )
        completed = subprocess.run(
            ["runuser", "-u", "nobody", "--", REACHABLE.executable, "-I", "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert completed.returncode == 0, completed.stderr
        assert json.loads(completed.stdout) == [owner.pw_uid, True, False]
        assert os.path.isdir("/etc")  # the symlink was removed, never followed
    finally:
        shutil.rmtree(base, ignore_errors=True)
