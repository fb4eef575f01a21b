"""Run untrusted Python in a throwaway, locked-down child process; judge its answers outside it.

Reward path: ``run_cases(program, cases)``. The program runs in the sandbox and receives only the *inputs* of
the hidden checks (JSON); it answers each call with JSON on its own descriptor. The judge (``judge.py``, in
this process — which the program cannot signal, trace, read or write) holds the expected values and decides
pass/fail from the parsed data. No marker, verdict, expected value or test source ever enters the sandbox,
so walking the stack, searching the heap, trace hooks or proxying the descriptor find nothing to forge.
``run_code(program)`` just runs a program; ``run_code(program, tests)`` runs test source *in the program's
interpreter* (the ``mtrl sandbox run --tests`` developer tool): a program can forge that result, so it is
never a reward.

Tiers (``Limits.isolation``; "auto" picks the strongest the process can use; docs/sandbox.md has the list
of guarantees and how each is tested):
- full (root with CAP_SYS_ADMIN): network, mount, IPC, UTS and PID namespaces, a per-run memory+pids
  cgroup (memory limited for the whole run, not per process), a root file system built from the allow-list
  (``filesystem.py``: what the interpreter maps and its standard library; every site-packages directory and
  copy of the project left out), one size-capped tmpfs for /tmp and the work directory, a fresh uid;
- fargate (root without CAP_SYS_ADMIN, e.g. an ECS Fargate task): a throwaway uid per concurrent run (so
  the kernel refuses its signals, ptrace and /proc access to the worker and to other runs; RLIMIT_NPROC
  counts only that uid), Landlock (``landlock.py``): read only the allow-list, write nothing;
- lambda (no CAP_SETUID): the worker made non-dumpable (its /proc files and memory closed to the same uid),
  Landlock as fargate (signals and abstract sockets scoped on ABI 6+); code that keeps uid 0 gets threads only.
Without Landlock the fargate and lambda tiers refuse to run anything (docs/sandbox.md says why).
Every tier: only PATH/LANG/HOME/TMPDIR in the environment (no credentials, no ECS credentials URI), ``python
-I -S`` (standard library only), rlimits (CPU, address space, processes, file size, open files), no capability
in any set, the seccomp filter (``_seccomp.py``: no sockets that can address anyone, no signals or resource
calls aimed at another process, no leaving the process group, no CLONE_PARENT, no SysV IPC, no ptrace,
namespaces, mounts...), output caps, a fresh work directory, a reaper that kills and reaps everything the
program started, and a wall-clock deadline. If the tier's isolation cannot be set up, ``SandboxUnavailableError``
is raised before anything runs.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import marshal
import os
import resource
import secrets
import selectors
import signal
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from mtrl.contracts.deadline import bounded
from mtrl.sandbox import judge, tiers
from mtrl.sandbox._seccomp import AUDIT_ARCH, seccomp_image
from mtrl.sandbox.filesystem import InterpreterError, filesystem_view, interpreter, unreachable_by_other_uids
from mtrl.sandbox.judge import Case
from mtrl.sandbox.landlock import LandlockError, shared_ruleset
from mtrl.sandbox.memory import RunMemory
from mtrl.sandbox.tiers import UID_RANGE, UIDS, RunCgroup, Tier, detect_tier, protect_worker, remove_tree, tasks_of_uid

_HERE = Path(__file__).resolve().parent
# Compiled once per process; the child only unmarshals them (the same Python version, so the same bytecode format)
# and runs them in one namespace: the seccomp filter's module first, then the harness, which ends by running main.
HARNESS_CODE = tuple(
    compile((_HERE / name).read_text(encoding="utf-8"), str(_HERE / name), "exec")
    for name in ("_seccomp.py", "_harness.py")
)
BOOTSTRAP = (
    "import marshal,sys;c,d=marshal.loads(sys.stdin.buffer.read());"
    "g={'__name__':'__sandbox__','__builtins__':__builtins__,'DATA':d};[exec(x,g) for x in c]"
)
SETUP_FAILED_EXIT = 125
ANSWERS_CAP = 1024 * 1024
WORKER_RESERVE = 32  # process slots of the worker's uid no run may take (lambda tier)
REAPER_GRACE_S = 2.0  # after SIGTERM, for the harness to kill and reap what the program left
TIER_CHOICES = ("auto", "full", "fargate", "lambda", "seccomp")  # "seccomp": the lambda tier's former name
TIER_RANK = {"lambda": 0, "fargate": 1, "full": 2}

Status = Literal["passed", "failed", "timeout", "error"]
__all__ = ["UID_RANGE", "Case", "Limits", "SandboxResult", "SandboxUnavailableError", "run_cases", "run_code"]


class SandboxUnavailableError(RuntimeError):
    """The required isolation cannot be set up on this machine (the message says which part)."""


@dataclass(frozen=True)
class Limits:
    """Per-execution limits. Defaults suit a unit-test run of a small generated program."""

    timeout_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 512  # per process (RLIMIT_AS) and for the whole run (a cgroup, else sampled: sandbox.memory)
    max_processes: int = 16
    file_mb: int = 8
    disk_mb: int = 16
    max_files: int = 512
    max_open_files: int = 64
    max_output_bytes: int = 64 * 1024
    # "auto": the strongest tier this process can use; a named tier forces it (never a stronger one than
    # the process can set up). "seccomp" is the lambda tier's former name.
    isolation: Literal["auto", "full", "fargate", "lambda", "seccomp"] = "auto"

    def __post_init__(self) -> None:
        if self.isolation not in TIER_CHOICES:
            raise ValueError(f"sandbox isolation must be one of {', '.join(TIER_CHOICES)} (got {self.isolation!r})")
        positive = {name: value for name, value in asdict(self).items() if name != "isolation"}
        bad = [name for name, value in positive.items() if not value > 0]
        if bad:
            raise ValueError(f"sandbox limits must be positive: {', '.join(bad)}")

    def tier(self) -> Tier:
        available = detect_tier()
        if self.isolation == "auto":
            return available
        wanted: Tier = "lambda" if self.isolation == "seccomp" else self.isolation
        if TIER_RANK[wanted] > TIER_RANK[available]:
            raise SandboxUnavailableError(f"the {wanted} sandbox tier needs privileges this process lacks")
        return wanted


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
    tier: str = ""
    isolation: list[str] = field(default_factory=list)
    uid: int | None = None  # the execution's own uid (full and fargate tiers), for audit logs and leak checks

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


def _clean_env(workdir: str, tier: Tier) -> dict[str, str]:
    """Built from nothing: no AWS_* keys, no ECS/EKS credential URIs or tokens, nothing from the worker."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": workdir,
        # Full tier: /tmp is a private tmpfs. Elsewhere /tmp is shared, so temporary files go in the work dir.
        "TMPDIR": "/tmp" if tier == "full" else workdir,  # noqa: S108
        "PYTHONIOENCODING": "utf-8",
    }


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


@dataclass
class _Run:
    captures: dict[str, _Capture]
    timed_out: bool
    exit_code: int | None
    tier: Tier
    isolation: list[str]
    uid: int | None
    started: float
    memory_over: int = 0  # the run's total resident bytes when it was killed for it (tiers without a cgroup)
    memory_mb: int = 0


def run_code(program: str, tests: str | None = None, limits: Limits | None = None) -> SandboxResult:
    """Execute ``program`` (as module ``solution``) and, if given, the ``test*`` functions of ``tests``.

    With ``tests`` the tests run in the program's interpreter: a developer tool, NOT a reward (the program
    can forge the outcome); rewards use ``run_cases``.
    """
    limits = limits or Limits()
    names = test_names(tests) if tests is not None else []
    marker = secrets.token_hex(16)
    mode, payload = ("tests", (tests, names)) if tests is not None else ("program", None)
    run = _execute(program, mode, payload, limits, marker=marker)
    result = _interpret(
        run.captures,
        marker,
        names=names,
        with_tests=tests is not None,
        timed_out=run.timed_out,
        exit_code=run.exit_code,
    )
    return _finish(result, run)


def run_cases(program: str, cases: list[Case] | tuple[Case, ...], limits: Limits | None = None) -> SandboxResult:
    """Score ``program`` on hidden ``cases``: it sees only their inputs; this process compares the answers."""
    limits = limits or Limits()
    cases = tuple(cases)
    if not cases or any(not case.checks for case in cases):
        raise ValueError("run_cases needs at least one case, each with at least one check")
    if len({case.name for case in cases}) != len(cases):
        raise ValueError("case names must be unique")
    run = _execute(program, "cases", judge.check_inputs(cases), limits)
    result = _judge(run, cases)
    return _finish(result, run)


def _finish(result: SandboxResult, run: _Run) -> SandboxResult:
    if run.memory_over:
        result.status, result.tests_passed = "failed", 0
        result.tests_failed = result.tests_total
        result.detail = f"memory: the run held {run.memory_over >> 20} MiB, over {run.memory_mb} MiB; group killed"
    result.duration_s = time.monotonic() - run.started
    result.uid, result.tier, result.isolation = run.uid, run.tier, run.isolation
    if result.status == "error" and result.detail.startswith("sandbox setup failed"):
        raise SandboxUnavailableError(result.detail)
    return result


def _prepare(tier: Tier) -> dict[str, Any]:
    """What ``tier`` needs from this process: the new root's parts (full) or the Landlock ruleset (the others).

    SandboxUnavailableError before anything runs when the tier cannot be set up.
    """
    if tier != "full" and not tiers.landlock_abi():  # without its file-system barrier the code could read the
        raise SandboxUnavailableError(  # worker's /proc, share /tmp and /dev/shm...: refused, not weakened
            f"the {tier} sandbox tier needs Landlock (Linux 5.13+ with landlock among the enabled LSMs); this "
            "kernel has none, so generated code is not run (docs/sandbox.md)"
        )
    try:
        view = filesystem_view()
    except InterpreterError as error:
        raise SandboxUnavailableError(str(error)) from None
    unreachable = unreachable_by_other_uids(view) if tier == "fargate" else ""
    if unreachable:
        raise SandboxUnavailableError(
            f"the fargate sandbox tier runs code as throwaway uids, which cannot reach {unreachable} (a directory "
            "on its way is not world-traversable): install Python where every uid can read it (as the reward-worker "
            "image does, /usr/local) or point MTRL_SANDBOX_PYTHON at such a copy"
        )
    if tier == "full":
        return {
            "skeleton": list(view.skeleton),
            "directories": list(view.directories),
            "files": list(view.files),
            "links": [list(link) for link in view.links],
            "hide": list(view.hide),
        }
    try:
        return {"landlock_fd": shared_ruleset(tiers.landlock_abi(), view)}
    except LandlockError as error:
        raise SandboxUnavailableError(str(error)) from None


@functools.cache
def _filter(*, allow_processes: bool) -> dict[str, Any]:
    """The seccomp filter of this machine, built once (a child writes only its own process group in)."""
    machine = os.uname().machine
    if machine not in AUDIT_ARCH:
        raise SandboxUnavailableError(f"the sandbox's seccomp filter does not know the {machine} architecture")
    image, slots = seccomp_image(machine, allow_processes=allow_processes)
    return {"seccomp": image, "seccomp_slots": slots}


def _process_limit(limits: Limits, own_uid: bool, uid: int) -> int:
    """RLIMIT_NPROC counts every process and thread of the uid: a fresh uid has none, the worker's has its own.

    With the worker's uid, runs share the worker's own limit (Lambda's, for one): no run may push the uid's
    count within WORKER_RESERVE of it, so however many runs attack at once, the worker can still start the
    next run and its threads (and RLIMIT_NPROC can never be raised above the worker's hard limit).
    """
    if own_uid:
        return limits.max_processes
    wanted = limits.max_processes + tasks_of_uid(uid) + 1  # + the run's reaper
    soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    ceilings = [value for value in (hard, soft - WORKER_RESERVE) if value != resource.RLIM_INFINITY and value >= 0]
    return max(1, min([wanted, *ceilings]))


def _execute(program: str, mode: str, payload: Any, limits: Limits, *, marker: str = "") -> _Run:
    tier = limits.tier()
    view = _prepare(tier)
    own_uid = tier in ("full", "fargate")
    uid = UIDS.acquire() if own_uid else os.getuid()
    if tier == "lambda" and os.geteuid() != 0:
        protect_worker()
    keeps_root = not own_uid and uid == 0  # the kernel applies no RLIMIT_NPROC to uid 0: threads only
    workdir = tempfile.mkdtemp(prefix="mtrl-sandbox-")
    root_dir = tempfile.mkdtemp(prefix="mtrl-root-") if tier == "full" else ""
    cgroup = RunCgroup.create(limits.memory_mb * 1024 * 1024, limits.max_processes + 2) if tier == "full" else None
    isolation = ["clean-env", "rlimits", "seccomp", "no-capabilities", "fresh-workdir", "deadline"]
    if tier == "full":
        isolation += ["netns", "ipcns", "pidns", "utsns", "mountns-allowlist-root", "fresh-uid"]
        isolation += ["cgroup-memory-pids"] if cgroup else ["run-memory"]
    else:
        isolation += ["fresh-uid"] if tier == "fargate" else ["non-dumpable"]
        isolation += ["landlock", "read-only-fs", "run-memory", *(["threads-only"] if keeps_root else [])]
    config = {
        "tier": tier,
        "uid": uid,
        "workdir": workdir,
        "root_dir": root_dir,
        "executable": interpreter(),
        **view,
        "cgroups": cgroup.directories if cgroup else [],
        "cpu_s": limits.cpu_s,
        "memory_mb": limits.memory_mb,
        "max_processes": _process_limit(limits, own_uid, uid),
        **_filter(allow_processes=not keeps_root),
        "file_mb": limits.file_mb,
        "disk_mb": limits.disk_mb,
        "max_files": limits.max_files,
        "max_open_files": limits.max_open_files,
        "marker": marker,
    }
    started = time.monotonic()
    read_results, write_results = os.pipe()
    config["result_fd"] = write_results  # pass_fds keeps the descriptor numbers in the child
    data = marshal.dumps((HARNESS_CODE, (config, program, mode, payload)))
    process: subprocess.Popen[bytes] | None = None
    try:
        process = subprocess.Popen(
            [interpreter(), "-I", "-S", "-B", "-c", BOOTSTRAP],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(write_results, *([view["landlock_fd"]] if "landlock_fd" in view else [])),
            cwd=workdir,
            env=_clean_env(workdir, tier),
            start_new_session=True,  # its own process group, killed as a whole
        )
        os.close(write_results)
        write_results = -1
        # Without a memory cgroup the run's total is sampled (mtrl.sandbox.memory) and bounded to memory_mb too.
        memory = None if cgroup else RunMemory(process.pid, limits.memory_mb * 1024 * 1024)
        captured, timed_out = _communicate(process, data, read_results, limits, started, memory=memory)
    finally:
        if write_results >= 0:
            os.close(write_results)
        if process is not None:
            _stop(process)
        if cgroup is not None:
            cgroup.remove()
        if own_uid:
            UIDS.release(uid)
        os.close(read_results)
        for directory in filter(None, (workdir, root_dir)):
            remove_tree(directory)
    assert process is not None
    over = memory.peak if memory is not None and memory.peak > memory.limit_bytes else 0
    owner = uid if own_uid else None
    return _Run(captured, timed_out, process.returncode, tier, isolation, owner, started, over, limits.memory_mb)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """End the run: the harness (its reaper) kills what the program left and reaps it; then its own group dies."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=REAPER_GRACE_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _judge(run: _Run, cases: tuple[Case, ...]) -> SandboxResult:  # noqa: PLR0912
    """The verdict from the parsed answers: the first answer per check counts; missing answers fail."""
    answers: dict[int, tuple[str, Any]] = {}
    program_failed = ""
    for line in bytes(run.captures["results"].data).splitlines():
        parsed = judge.parse_answer(line)
        if parsed is None:
            continue
        index, kind, answer = parsed
        if kind == "program_failed":
            program_failed = program_failed or answer
        else:
            answers.setdefault(index, (kind, answer))
    result = SandboxResult(
        status="failed",
        tests_total=len(cases),
        stdout=run.captures["stdout"].text(),
        stderr=run.captures["stderr"].text(),
        output_truncated=run.captures["stdout"].truncated or run.captures["stderr"].truncated,
        exit_code=run.exit_code,
    )
    index = 0
    for case in cases:
        reasons = []
        for check in case.checks:
            reason = "program failed" if program_failed else judge.verdict(check, answers.get(index))
            index += 1
            if reason:
                reasons.append(reason)
        if reasons:
            result.failures[case.name] = reasons[0]
        else:
            result.tests_passed += 1
    result.tests_failed = result.tests_total - result.tests_passed
    if run.timed_out:
        result.status, result.detail = "timeout", "wall-clock limit reached; the process group was killed"
    elif run.exit_code == SETUP_FAILED_EXIT and not answers and not program_failed:
        result.status, result.detail = "error", "sandbox setup failed: " + result.stderr.strip()[-300:]
    elif program_failed:
        result.detail = "program raised " + program_failed
    elif result.tests_passed == result.tests_total:
        result.status = "passed"
    return result


def _communicate(
    process: subprocess.Popen[bytes],
    payload: bytes,
    results_fd: int,
    limits: Limits,
    started: float,
    *,
    memory: RunMemory | None,
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
    deadline = bounded(started, limits.timeout_s)  # never past the episode's deadline (mtrl.contracts.deadline)
    exited_at: float | None = None
    try:
        while selector.get_map():
            now = time.monotonic()
            if now >= deadline or (memory is not None and exited_at is None and memory.over()):
                return captures, now >= deadline  # the caller kills the group (_finish says why, for memory)
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
        result.status, result.detail = (
            "error",
            f"the program ended the run before it finished ({_end_reason(exit_code)})",
        )
    return result


def _end_reason(exit_code: int | None) -> str:
    """How the process ended. The harness's PID-namespace forwarder reports a signal death as 128 + signal (the
    shell convention), so both that and a negative return code name the signal (e.g. RLIMIT_CPU's SIGKILL)."""
    number = -exit_code if exit_code is not None and exit_code < 0 else None
    if exit_code is not None and 128 < exit_code < 128 + signal.NSIG:
        number = exit_code - 128
    if number is None:
        return f"exit code {exit_code}"
    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
    return f"signal {number}, {name}"
