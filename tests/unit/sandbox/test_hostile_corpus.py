"""The hostile corpus of issue 23 (``hostile.py``) holds in every tier, as CI runs them, and leaves nothing.

As CI runs them: the fargate tier as root with CAP_SYS_ADMIN dropped from the bounding set (``setpriv``); the
lambda tier as the unprivileged user ``mtrl-ci`` (``runuser``), started by a launcher of the same uid holding a
secret in its environment; root without CAP_SYS_ADMIN *and* CAP_SETUID (§7: the code keeps uid 0, so it must
hold no capability and may start no process). Each probe process is the worker: it runs the corpus and
reports what every run left behind. The same corpus also runs in each tier forced from this (root) process.
Without Landlock (§8) the fargate and lambda tiers refuse to run anything: simulated through the
``tiers.landlock_abi`` seam.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from mtrl.sandbox import Case, Check, Limits, SandboxUnavailableError, run_cases, run_code, tiers
from mtrl.sandbox.filesystem import interpreter, interpreter_layout
from tests.unit.sandbox import hostile
from tests.unit.sandbox.reachable_python import CI_USER, REACHABLE, REPO_ROOT, ci_user_exists, needs_ci_user

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the tier checks start from root (as in CI)")
TASK_BANK = REPO_ROOT / "environments" / "ask_to_code" / "tasks.py"
LIMITS = {"timeout_s": 10.0, "cpu_s": 5, "memory_mb": 256, "max_processes": 8}
# The probe: this checkout's copy on sys.path, then the corpus from this process, then a report on stdout.
PROBE = r"""
import json, os, subprocess, sys
document = json.loads(sys.stdin.read())
sys.path.insert(0, document["project"])
from mtrl.sandbox import Limits
from mtrl.sandbox.tiers import effective_capabilities
from tests.unit.sandbox.hostile import SECRET, Context, run_corpus
victim = subprocess.Popen(["sleep", "60"], env={"MTRL_HOSTILE_SECRET": SECRET})
context = Context(**document["context"])
context.victim, context.launcher = victim.pid, os.getppid()
context.worker_had_setpcap = bool(effective_capabilities() >> 8 & 1)
outcome = run_corpus(Limits(**document["limits"]), context)
outcome["victim_alive"] = victim.poll() is None
victim.kill()
victim.wait()
print(json.dumps(outcome))
"""
# The launcher of the lambda probe: a process of the same uid with credentials in its environment (as Lambda's).
LAUNCHER = "import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:], check=False).returncode)"


def ci_user() -> pwd.struct_passwd | None:
    return pwd.getpwnam(CI_USER) if ci_user_exists() else None


@dataclass
class Target:
    context: hostile.Context
    listeners: tuple[socket.socket, socket.socket]
    victim: subprocess.Popen[bytes]


@pytest.fixture
def target() -> Iterator[Target]:
    """Task-bank copies where images and packages put data files, listening sockets, a same-uid victim."""
    token = "mtrlhostile" + secrets.token_hex(4)
    stdlib = interpreter_layout(interpreter()).stdlib
    libc_dir = next(os.path.dirname(p) for p in interpreter_layout(interpreter()).mapped if "/libc.so" in p)
    prefix = os.path.dirname(os.path.dirname(interpreter()))
    places = ["/usr/local/share", "/usr/share", libc_dir, "/opt", "/srv", "/var/tmp", "/home"]
    places += [os.path.join(stdlib, "site-packages"), os.path.join(prefix, "share")]  # a pip-installed environment
    made: list[Path] = []
    copies = [str(TASK_BANK), str(REACHABLE.project / "environments" / "ask_to_code" / "tasks.py")]
    for place in places:
        top = Path(place) / f"{token}-bank"
        target = top / "environments" / "ask_to_code"
        target.mkdir(parents=True, mode=0o755)
        shutil.copy(TASK_BANK, target / "tasks.py")
        for path in (top, *top.rglob("*")):
            path.chmod(0o755 if path.is_dir() else 0o644)  # world-readable: only the sandbox stands in the way
        made.append(top)
        copies.append(str(target / "tasks.py"))
    sockets_dir = tempfile.mkdtemp(prefix="mtrl-hostile-sockets-")
    os.chmod(sockets_dir, 0o777)
    socket_path = os.path.join(sockets_dir, "dgram.sock")
    listeners = hostile.listener(socket_path, token)
    workdirs = tempfile.mkdtemp(prefix="mtrl-hostile-workdirs-")
    os.chmod(workdirs, 0o755)
    victim = subprocess.Popen(["sleep", "60"], env={"MTRL_HOSTILE_SECRET": hostile.SECRET})
    ctx = hostile.Context(
        token=token,
        copies=copies,
        tops=["/usr", "/opt", "/srv", "/var", "/home", "/work", "/app", "/root", prefix],
        socket_path=socket_path,
        abstract_name=token,
        victim=victim.pid,
        launcher=os.getppid(),
        workdirs=workdirs,
        worker_had_setpcap=True,
    )
    yield Target(ctx, listeners, victim)
    victim.kill()
    victim.wait()
    for sock in listeners:
        sock.close()
    for path in [*made, Path(sockets_dir), Path(workdirs)]:
        shutil.rmtree(path, ignore_errors=True)


def held(outcome: dict[str, Any], tier: str, target: Target) -> None:
    limits = Limits(**LIMITS, isolation=tier)  # type: ignore[arg-type]
    assert hostile.problems(outcome, tier, limits) == []
    assert hostile.received(target.listeners) == []  # no datagram left the sandbox


@pytest.mark.parametrize("tier", ["full", "fargate", "lambda"])
def test_the_corpus_holds_in_each_tier_forced_from_root(
    tier: str, target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", tempfile.tempdir)
    monkeypatch.setenv("MTRL_HOSTILE_SECRET", hostile.SECRET)
    outcome = hostile.run_corpus(Limits(**LIMITS, isolation=tier), target.context)  # type: ignore[arg-type]
    held(outcome, tier, target)
    assert target.victim.poll() is None
    if tier == "lambda":  # root without its uid switch keeps uid 0: no capability, threads but no processes
        capabilities = outcome["runs"]["capabilities"]["report"]
        assert capabilities["uid"] == 0
        assert capabilities["bounding"] == []
        assert outcome["runs"]["processes"]["report"]["forked"] == 0
        assert "threads-only" in outcome["runs"]["processes"]["isolation"]


def run_probe(prefix: list[str], target: Target, *, env: dict[str, str] | None = None) -> dict[str, Any]:
    document = {"project": str(REACHABLE.project), "context": asdict(target.context), "limits": LIMITS}
    completed = subprocess.run(
        [*prefix, REACHABLE.executable, "-I", "-c", PROBE],
        input=json.dumps(document),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    outcome: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    assert outcome["victim_alive"] is True
    return outcome


@pytest.mark.other_uids
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux; .ci/run installs it)")
def test_the_corpus_holds_in_the_fargate_tier_as_ci_runs_it(target: Target) -> None:
    """Root with Docker's default-like capabilities but no CAP_SYS_ADMIN: throwaway uids, Landlock, seccomp."""
    outcome = run_probe(["setpriv", "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin", "--"], target)
    assert outcome["context"]["worker_had_setpcap"] is True
    held(outcome, "fargate", target)
    assert all("fresh-uid" in run["isolation"] for run in outcome["runs"].values())


@pytest.mark.other_uids
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux; .ci/run installs it)")
def test_root_without_sys_admin_and_setuid_runs_code_without_any_capability(target: Target) -> None:
    """§7: such a root is the lambda tier and its code keeps uid 0, so it must hold no capability in any set."""
    drop = "-sys_admin,-setuid"
    outcome = run_probe(["setpriv", "--bounding-set", drop, "--inh-caps", drop, "--"], target)
    held(outcome, "lambda", target)
    capabilities = outcome["runs"]["capabilities"]["report"]
    assert (capabilities["uid"], capabilities["bounding"], capabilities["ambient"]) == (0, [], [])
    for name in ("escape_read_kernel_log", "escape_chown", "escape_sethostname", "escape_raise_hard_limit"):
        assert capabilities[name] == 1, name  # EPERM: the capability is gone, not merely unused
    assert outcome["runs"]["processes"]["report"]["forked"] == 0  # no RLIMIT_NPROC binds uid 0: threads only


@pytest.mark.other_uids
@needs_ci_user
@pytest.mark.skipif(shutil.which("runuser") is None, reason="needs runuser (util-linux; .ci/run installs it)")
def test_the_corpus_holds_in_the_lambda_tier_as_ci_runs_it(target: Target) -> None:
    user = ci_user()
    assert user is not None, f"{CI_USER} is missing: .ci/run must create it"
    os.chown(target.context.workdirs, user.pw_uid, user.pw_gid)
    launcher = [REACHABLE.executable, "-I", "-c", LAUNCHER]
    env = {"PATH": "/usr/bin:/bin", "MTRL_HOSTILE_SECRET": hostile.SECRET, "LANG": "C.UTF-8"}
    runuser = shutil.which("runuser")
    assert runuser is not None
    outcome = run_probe([runuser, "-u", CI_USER, "--", *launcher], target, env=env)
    held(outcome, "lambda", target)
    assert all("non-dumpable" in run["isolation"] for run in outcome["runs"].values())
    neighbours = outcome["runs"]["neighbours"]["report"]
    assert neighbours["escape_launcher_environ"] == 13  # EACCES (Landlock), though the uid is the launcher's


PROGRAM = "def add(a, b):\n    return a + b\n"
CASES = [Case("small", (Check("add", (1, 2), 3),))]


@pytest.mark.parametrize("tier", ["fargate", "lambda"])
def test_without_landlock_nothing_runs_outside_the_full_tier(
    tier: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """§8, decided: no Landlock, no reward. A kernel without it is simulated at the seam the runner reads."""
    monkeypatch.setattr(tiers, "landlock_abi", lambda: 0)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    limits = Limits(isolation=tier)  # type: ignore[arg-type]
    with pytest.raises(SandboxUnavailableError, match="needs Landlock"):
        run_cases(PROGRAM, CASES, limits)
    with pytest.raises(SandboxUnavailableError, match="needs Landlock"):
        run_code("print('never')", limits=limits)
    assert list(tmp_path.iterdir()) == []  # refused before a work directory (or anything else) existed


def test_without_landlock_the_full_tier_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    if tiers.detect_tier() != "full":
        pytest.skip("needs root with CAP_SYS_ADMIN (as in CI)")
    monkeypatch.setattr(tiers, "landlock_abi", lambda: 0)
    assert run_cases(PROGRAM, CASES, Limits(isolation="full")).status == "passed"


def test_the_sandbox_interpreter_must_be_this_python_version(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """MTRL_SANDBOX_PYTHON naming another version is refused by name (the harness travels as bytecode)."""
    other = tmp_path / "python3.99"
    other.write_text(
        '#!/bin/sh\necho \'{"magic": "0d0d0d0a", "stdlib": "/nowhere", "mapped": [], "version": "3.99.0"}\'\n'
    )
    other.chmod(0o755)
    monkeypatch.setenv("MTRL_SANDBOX_PYTHON", str(other))
    with pytest.raises(SandboxUnavailableError, match=r"Python 3\.99\.0.*must name the same Python version"):
        run_cases(PROGRAM, CASES, Limits(isolation="lambda"))
