"""Run untrusted Python (and optional hidden tests) in a throwaway, locked-down child process.

Isolation tiers (see ``_harness.py`` for the child side). As root (CI, a root worker), everything below;
without root (e.g. a Fargate task, which can never create namespaces) the seccomp tier: clean
environment, rlimits, the seccomp filter (no ``socket()`` at all, no signals to the worker, init or other
process groups, no setsid/setpgid, ptrace or io_uring), output caps, marked results and the deadline.
Full tier:
- environment: only PATH/LANG/HOME/TMPDIR — no AWS or other credentials; ``python -I -S`` ignores
  PYTHON* variables, user and site packages (the standard library only);
- network: a fresh network namespace with no interface up (loopback and 169.254.169.254 unreachable);
- filesystem: a size-capped tmpfs work directory (the only writable place besides throwaway /tmp), every
  other mount read-only, the project checkout (hidden tests, reference solutions) and /root replaced by
  empty directories, and a fresh unprivileged uid per execution that owns nothing on the host;
- resources: CPU seconds, address space, processes (per the fresh uid), file size, open files;
- syscalls: the seccomp filter as above (defence in depth: the namespaces already cut the network);
- time: a wall-clock deadline, after which the process group and every process of the execution's uid
  are killed (a program that escapes its group with setsid is still found by uid);
- output: stdout/stderr captured up to a cap, the rest discarded while still draining the pipes;
- results: reported on a separate pipe, each line prefixed with a random per-execution marker the
  program never sees (it arrives on stdin, which is consumed before the program runs), so printing
  "passed" — or anything else — cannot forge a result.

Reward hacking through the tests: only the test functions named in the trusted test source run and
count; they are compiled and run with references and a builtins snapshot taken before the program ran;
``same(actual, expected)`` (exact types, recursively) defeats objects whose ``__eq__`` always says True.
Residual risk, by design of an in-process test runner: the program shares an interpreter with the hidden
tests, so a program that deliberately mutates shared modules or searches interpreter memory (for the
marker) could still forge a result. Run the reward worker in its own container (as deployed) regardless.

What the seccomp tier cannot give without privileges: a private filesystem (the program can read and
write what the worker's uid can, including the environment packages and so ask_to_code's hidden tests;
run the worker as an unprivileged user with a read-only root file system, and prefer a root worker or a
dedicated sandbox service where reading the tests would matter) and killing a program's leftovers by uid
(it cannot leave its process group, so the group kill suffices). If even the seccomp filter cannot be
installed, ``SandboxUnavailableError`` is raised: code is never run without a network barrier.
"""

from __future__ import annotations

import ast
import contextlib
import marshal
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

_HARNESS_PATH = Path(__file__).resolve().parent / "_harness.py"
# Compiled once per process; the child only unmarshals it (same interpreter, so the same bytecode format).
HARNESS_CODE = compile(_HARNESS_PATH.read_text(encoding="utf-8"), str(_HARNESS_PATH), "exec")
BOOTSTRAP = (
    "import marshal,sys;c,d=marshal.loads(sys.stdin.buffer.read());"
    "exec(c,{'__name__':'__sandbox__','__builtins__':__builtins__,'DATA':d})"
)
SETUP_FAILED_EXIT = 125
UID_RANGE = (200_000, 1_200_000)  # far above any real account; one fresh uid per execution

Status = Literal["passed", "failed", "timeout", "error"]


class SandboxUnavailableError(RuntimeError):
    """The required isolation cannot be set up on this machine (the message says which part)."""


@dataclass(frozen=True)
class Limits:
    """Per-execution limits. Defaults suit a unit-test run of a small generated program."""

    timeout_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 512
    max_processes: int = 16
    file_mb: int = 8
    disk_mb: int = 16
    max_files: int = 512
    max_open_files: int = 64
    max_output_bytes: int = 64 * 1024
    # "auto": namespaces + fresh uid when root, else the unprivileged seccomp tier; "seccomp" forces the latter.
    isolation: Literal["auto", "seccomp"] = "auto"

    def __post_init__(self) -> None:
        if self.isolation not in ("auto", "seccomp"):
            raise ValueError(f"sandbox isolation must be 'auto' or 'seccomp' (got {self.isolation!r})")
        positive = {name: value for name, value in asdict(self).items() if name != "isolation"}
        bad = [name for name, value in positive.items() if not value > 0]
        if bad:
            raise ValueError(f"sandbox limits must be positive: {', '.join(bad)}")


@dataclass
class SandboxResult:
    status: Status
    tests_passed: int = 0
    tests_failed: int = 0
    tests_total: int = 0
    failures: dict[str, str] = field(default_factory=dict)
    detail: str = ""
    stdout: str = ""
    stderr: str = ""
    output_truncated: bool = False
    exit_code: int | None = None
    duration_s: float = 0.0
    isolation: list[str] = field(default_factory=list)
    uid: int | None = None  # the execution's own uid (full tier), for audit logs and leak checks

    @property
    def pass_fraction(self) -> float:
        return self.tests_passed / self.tests_total if self.tests_total else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "pass_fraction": self.pass_fraction}


def test_names(tests: str) -> list[str]:
    """Top-level ``test*`` functions of a trusted test file, in order: exactly what is run and counted.

    Taken from the source, not from the child: a program cannot add passing "tests" of its own (e.g. via
    ``from solution import *``) or hide one.
    """
    try:
        tree = ast.parse(tests)
    except SyntaxError as error:
        raise ValueError(f"tests do not parse: {error}") from None
    names: list[str] = []
    for node in tree.body:
        # Plain functions only: calling an ``async def`` would just create a coroutine and "pass".
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test") and node.name not in names:
            names.append(node.name)
    return names


def count_tests(tests: str) -> int:
    return len(test_names(tests))


def _clean_env(workdir: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": workdir,
        "TMPDIR": "/tmp",  # noqa: S108 - inside the sandbox /tmp is a private throwaway tmpfs
        "PYTHONIOENCODING": "utf-8",
    }


def _hidden_paths() -> list[str]:
    """Directories the program must not read (full tier): the project checkout with the task banks."""
    root = Path(__file__).resolve().parents[2]
    override = os.environ.get("MTRL_PROJECT_ROOT")
    return sorted({str(root), *([str(Path(override).resolve())] if override else [])})


def _tasks_of_uid(uid: int) -> int:
    """Threads currently owned by ``uid`` (what RLIMIT_NPROC counts)."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid == uid:
                total += len(os.listdir(f"/proc/{entry.name}/task"))
        except OSError:
            continue
    return total


def _is_zombie(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def _kill_uid(uid: int) -> None:
    """SIGKILL every live process owned by ``uid`` (repeat: a fork bomb may spawn while we scan)."""
    for _ in range(50):
        alive = False
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                if entry.stat().st_uid != uid or _is_zombie(entry.name):
                    continue
                os.kill(int(entry.name), signal.SIGKILL)
                alive = True
            except (ProcessLookupError, FileNotFoundError, PermissionError):
                continue
        if not alive:
            return
        time.sleep(0.001)


class _Capture:
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.truncated = False

    def feed(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        if len(chunk) > room:
            self.truncated = True
        if room > 0:
            self.data += chunk[:room]

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


def run_code(program: str, tests: str | None = None, limits: Limits | None = None) -> SandboxResult:
    """Execute ``program`` (as module ``solution``) and, if given, the ``test*`` functions of ``tests``."""
    limits = limits or Limits()
    names = test_names(tests) if tests is not None else []
    privileged = os.geteuid() == 0 and limits.isolation == "auto"
    uid = secrets.randbelow(UID_RANGE[1] - UID_RANGE[0]) + UID_RANGE[0] if privileged else os.getuid()
    marker = secrets.token_hex(16)
    workdir = tempfile.mkdtemp(prefix="mtrl-sandbox-")
    config = {
        "uid": uid,
        "workdir": workdir,
        "namespaces": privileged,
        "hide": _hidden_paths(),
        "cpu_s": limits.cpu_s,
        "memory_mb": limits.memory_mb,
        # RLIMIT_NPROC counts every process and thread of the uid: a fresh uid has none, ours has the worker's.
        "max_processes": limits.max_processes + (0 if privileged else _tasks_of_uid(uid)),
        "file_mb": limits.file_mb,
        "disk_mb": limits.disk_mb,
        "max_files": limits.max_files,
        "max_open_files": limits.max_open_files,
    }
    started = time.monotonic()
    read_results, write_results = os.pipe()
    config["result_fd"] = write_results  # pass_fds keeps the descriptor number in the child
    payload = marshal.dumps((HARNESS_CODE, (config, marker, program, tests, names)))
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", "-c", BOOTSTRAP],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(write_results,),
            cwd=workdir,
            env=_clean_env(workdir),
            start_new_session=True,  # its own process group, killed as a whole
        )
    except BaseException:
        os.close(read_results)
        os.close(write_results)
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    os.close(write_results)
    try:
        captured, timed_out = _communicate(process, payload, read_results, limits, started)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        if privileged:
            _kill_uid(uid)
        os.close(read_results)
        shutil.rmtree(workdir, ignore_errors=True)
    result = _interpret(
        captured, marker, names=names, with_tests=tests is not None, timed_out=timed_out, exit_code=process.returncode
    )
    result.duration_s = time.monotonic() - started
    result.uid = uid if privileged else None
    result.isolation = (
        ["clean-env", "rlimits", "seccomp", "netns", "mountns-readonly", "tmpfs-workdir", "fresh-uid"]
        if privileged
        else ["clean-env", "rlimits", "seccomp"]
    )
    if result.status == "error" and result.detail.startswith("sandbox setup failed"):
        raise SandboxUnavailableError(result.detail)
    return result


def _communicate(
    process: subprocess.Popen[bytes], payload: bytes, results_fd: int, limits: Limits, started: float
) -> tuple[dict[str, _Capture], bool]:
    """Feed stdin, drain stdout/stderr/results under caps until the child is done or the deadline passes."""
    assert process.stdin is not None
    assert process.stdout is not None
    assert process.stderr is not None
    captures = {
        "stdout": _Capture(limits.max_output_bytes),
        "stderr": _Capture(limits.max_output_bytes),
        "results": _Capture(1024 * 1024),
    }
    selector = selectors.DefaultSelector()
    os.set_blocking(process.stdin.fileno(), False)
    selector.register(process.stdin, selectors.EVENT_WRITE, "stdin")
    selector.register(process.stdout, selectors.EVENT_READ, "stdout")
    selector.register(process.stderr, selectors.EVENT_READ, "stderr")
    selector.register(results_fd, selectors.EVENT_READ, "results")
    pending = memoryview(payload)
    deadline = started + limits.timeout_s
    exited_at: float | None = None
    try:
        while selector.get_map():
            now = time.monotonic()
            if now >= deadline:
                return captures, True
            if exited_at is None and process.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > 0.5:
                break  # pipes held open by a leftover background process: the caller kills it
            for key, _ in selector.select(timeout=min(deadline - now, 0.05)):
                name = key.data
                if name == "stdin":
                    try:
                        written = os.write(key.fd, pending[:65536])
                    except BlockingIOError:
                        written = 0
                    except BrokenPipeError:  # the child is gone; what it did not read no longer matters
                        written = len(pending)
                    pending = pending[written:]
                    if not pending:
                        selector.unregister(key.fileobj)
                        process.stdin.close()
                    continue
                chunk = os.read(key.fd, 65536)
                if chunk:
                    captures[name].feed(chunk)
                else:
                    selector.unregister(key.fileobj)
        return captures, False
    finally:
        selector.close()
        with contextlib.suppress(OSError):
            process.stdin.close()


def _parse_results(data: bytes, marker: str) -> tuple[set[str], dict[str, str], dict[str, str]]:
    """(passed test names, failed name -> reason, other events) from the marked result lines."""
    passed: set[str] = set()
    failures: dict[str, str] = {}
    events: dict[str, str] = {}
    prefix = marker + " "
    for line in data.decode("utf-8", "replace").splitlines():
        if not line.startswith(prefix):
            continue  # not written by the harness: ignore whatever the program put on the pipe
        kind, _, rest = line[len(prefix) :].partition(" ")
        name, _, detail_repr = rest.partition(" ")
        try:
            detail = str(ast.literal_eval(detail_repr))
        except (ValueError, SyntaxError):
            detail = detail_repr
        if kind == "pass":
            passed.add(name)
        elif kind == "fail":
            failures[name] = detail
        else:
            events[kind] = detail
    return passed, failures, events


def _interpret(
    captures: dict[str, _Capture],
    marker: str,
    *,
    names: list[str],
    with_tests: bool,
    timed_out: bool,
    exit_code: int | None,
) -> SandboxResult:
    passed, failures, events = _parse_results(bytes(captures["results"].data), marker)
    total = len(names)
    passed &= set(names)  # only the trusted test names count
    failures = {name: reason for name, reason in failures.items() if name in names}
    output_truncated = captures["stdout"].truncated or captures["stderr"].truncated
    result = SandboxResult(
        status="error",
        tests_passed=len(passed),
        tests_failed=0,
        tests_total=total,
        failures=failures,
        stdout=captures["stdout"].text(),
        stderr=captures["stderr"].text(),
        output_truncated=output_truncated,
        exit_code=exit_code,
    )
    result.tests_failed = total - result.tests_passed
    if timed_out:
        result.status, result.detail = "timeout", "wall-clock limit reached; the process group was killed"
    elif exit_code == SETUP_FAILED_EXIT and not events and not passed:
        result.status, result.detail = "error", "sandbox setup failed: " + result.stderr.strip()[-300:]
    elif "program_failed" in events:
        result.status, result.detail = "failed", "program raised " + events["program_failed"]
        result.tests_passed, result.tests_failed = 0, total
    elif "tests_error" in events:
        result.status, result.detail = "failed", "tests could not load the program: " + events["tests_error"]
        result.tests_passed, result.tests_failed = 0, total
    elif not with_tests and "program_ok" in events:
        result.status = "passed"
    elif with_tests and "done" in events:
        result.status = "passed" if total and not failures and result.tests_passed == total else "failed"
        if total == 0:
            result.detail = "no test functions found"
    else:
        reason = f"signal {-exit_code}" if exit_code is not None and exit_code < 0 else f"exit code {exit_code}"
        result.status, result.detail = "error", f"the program ended the run before it finished ({reason})"
    return result
