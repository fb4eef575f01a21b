"""Each sandbox tier against programs that attack the worker, other runs, and the machine (issue 13 §2).

The fargate tier runs for real as root with CAP_SYS_ADMIN dropped from the bounding set (``setpriv``), the
lambda tier as the unprivileged user ``mtrl-ci`` that .ci/run creates (``runuser``); both also run forced
from this (root) process. The full-tier checks (IPC and PID namespaces, the run-wide memory cgroup, every
copy of the project hidden) need root with CAP_SYS_ADMIN, as in CI. The probes run an interpreter and a copy of
the checkout that every uid can reach (conftest.py, reachable_python.py). Issue 23's ten classes:
test_hostile_corpus.py.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from mtrl.sandbox import Limits, run_code
from mtrl.sandbox.filesystem import filesystem_view
from mtrl.sandbox.tiers import detect_tier
from tests.unit.sandbox.reachable_python import CI_USER, REACHABLE, ci_user_exists, needs_ci_user
from tests.unit.sandbox.test_forgery import TASKS

REPO_ROOT = Path(__file__).resolve().parents[3]
TASK_BANK = REPO_ROOT / "environments" / "ask_to_code" / "tasks.py"
HARNESS = REPO_ROOT / "mtrl" / "sandbox" / "_harness.py"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the tier checks start from root (as in CI)")

# Everything a sandboxed program could try against the worker W, another run V, and the machine. Every
# entry must fail (an errno or exception name); "ok" means the attack worked.
CROSS_PROCESS_ATTACKS = """
import ctypes, json, os, resource, socket
libc = ctypes.CDLL(None, use_errno=True)
W, V = {worker}, {victim}
x86 = os.uname().machine == "x86_64"
out = {{}}
def attempt(name, action):
    try:
        action()
        out[name] = "ok"
    except OSError as error:
        out[name] = error.errno
    except Exception as error:
        out[name] = type(error).__name__
def syscall(x86_number, arm_number, *args):
    if libc.syscall(x86_number if x86 else arm_number, *args) < 0:
        raise OSError(ctypes.get_errno(), "syscall")
info = ctypes.create_string_buffer(128)
attempt("kill_worker", lambda: os.kill(W, 0))
attempt("kill_other_run", lambda: os.kill(V, 0))
attempt("kill_everyone", lambda: os.kill(-1, 0))
attempt("sigqueue_worker", lambda: syscall(129, 138, W, 0, info))
attempt("tgkill_worker", lambda: syscall(234, 131, W, W, 0))
attempt("tkill_worker", lambda: syscall(200, 130, W, 0))
attempt("prlimit_worker", lambda: resource.prlimit(W, resource.RLIMIT_CORE, (0, 0)))
attempt("prlimit_other_run", lambda: resource.prlimit(V, resource.RLIMIT_NOFILE, (3, 3)))
attempt("setpriority_worker", lambda: os.setpriority(os.PRIO_PROCESS, W, 19))
attempt("setpriority_user", lambda: os.setpriority(os.PRIO_USER, 0, 19))
attempt("affinity_worker", lambda: os.sched_setaffinity(W, {{0}}))
attempt("ptrace_worker", lambda: syscall(101, 117, 16, W, 0, 0))
attempt("worker_environ", lambda: open(f"/proc/{{W}}/environ", "rb").read())
attempt("worker_mem", lambda: os.close(os.open(f"/proc/{{W}}/mem", os.O_RDWR)))
attempt("other_run_environ", lambda: open(f"/proc/{{V}}/environ", "rb").read())
attempt("hidden_tests", lambda: open({tasks!r}).read())
attempt("hidden_tests_copy", lambda: open({tasks_copy!r}).read())
attempt("harness_source", lambda: open({harness!r}).read())
attempt("socket", lambda: socket.socket())
attempt("new_user_namespace", lambda: syscall(272, 97, 0x10000000))
attempt("leave_group", lambda: os.setsid())
print(json.dumps(out))
"""


def attack_program(worker: int | str, victim: int | str) -> str:
    copy = REACHABLE.project / "environments" / "ask_to_code" / "tasks.py"
    return CROSS_PROCESS_ATTACKS.format(
        worker=worker, victim=victim, tasks=str(TASK_BANK), tasks_copy=str(copy), harness=str(HARNESS)
    )


def assert_all_blocked(report: dict[str, object]) -> None:
    assert report, "the attack program printed nothing"
    worked = sorted(name for name, outcome in report.items() if outcome == "ok")
    assert worked == []


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    """Another run's process (same uid as the worker, as a concurrent lambda-tier sandbox would be)."""
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


@pytest.mark.parametrize("tier", ["full", "fargate", "lambda"])
def test_forced_tier_blocks_every_cross_process_attack(
    tier: str, victim: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MTRL_TEST_WORKER_SECRET", "sekrit")
    limits = Limits(timeout_s=10, cpu_s=5, memory_mb=256, isolation=tier)  # type: ignore[arg-type]
    result = run_code(attack_program(os.getpid(), victim.pid), limits=limits)
    assert result.status == "passed", result.stderr
    assert_all_blocked(json.loads(result.stdout))
    assert victim.poll() is None
    assert "sekrit" not in result.stdout


PROBE = """
import json, os, subprocess, sys
sys.path.insert(0, {repo!r})
from mtrl.sandbox import Limits, run_cases, run_code
from environments.ask_to_code.tasks import TASKS
victim = subprocess.Popen(["sleep", "60"])
os.environ["MTRL_TEST_WORKER_SECRET"] = "sekrit"
program = {program!r}.replace("VICTIM", str(victim.pid)).replace("WORKER", str(os.getpid()))
attack = run_code(program, limits=Limits(timeout_s=10, cpu_s=5, memory_mb=256))
task = TASKS[0]
reference = run_cases(task.solution, task.cases)
naive = run_cases(task.naive, task.cases)
alive = victim.poll() is None
victim.kill()
print(json.dumps({{
    "tier": attack.tier, "isolation": attack.isolation, "status": attack.status, "stderr": attack.stderr[-300:],
    "report": json.loads(attack.stdout or "{{}}"), "victim_alive": alive,
    "reference": reference.pass_fraction, "naive": naive.pass_fraction,
}}))
"""


def run_probe(prefix: list[str]) -> dict[str, object]:
    probe = PROBE.format(repo=str(REACHABLE.project), program=attack_program("WORKER", "VICTIM"))
    completed = subprocess.run(
        [*prefix, REACHABLE.executable, "-I", "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    document: dict[str, object] = json.loads(completed.stdout.splitlines()[-1])
    return document


def check_probe(document: dict[str, object], tier: str) -> None:
    assert document["tier"] == tier, document
    assert document["status"] == "passed", document["stderr"]
    report = document["report"]
    assert isinstance(report, dict)
    assert_all_blocked(report)
    assert document["victim_alive"] is True
    assert document["reference"] == 1.0
    assert document["naive"] == 0.0  # slugify's naive guess (hyphens, no cut) fails every case


@pytest.mark.other_uids
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux; .ci/run installs it)")
def test_fargate_tier_root_without_cap_sys_admin() -> None:
    """Root with Docker's default-like capabilities but no CAP_SYS_ADMIN: namespaces are impossible."""
    document = run_probe(["setpriv", "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin", "--"])
    check_probe(document, "fargate")
    isolation = document["isolation"]
    assert isinstance(isolation, list)
    assert "fresh-uid" in isolation


@pytest.mark.other_uids
@needs_ci_user
def test_lambda_tier_as_an_unprivileged_user() -> None:
    assert ci_user_exists(), f"{CI_USER} is missing: .ci/run must create it"
    document = run_probe(["runuser", "-u", CI_USER, "--"])
    check_probe(document, "lambda")
    isolation = document["isolation"]
    assert isinstance(isolation, list)
    assert "non-dumpable" in isolation


needs_full = pytest.mark.skipif(detect_tier() != "full", reason="needs root with CAP_SYS_ADMIN (as in CI)")
FULL = Limits(timeout_s=10, cpu_s=5, memory_mb=512, max_processes=16, isolation="full")


@needs_full
def test_sysv_ipc_does_not_outlive_the_run() -> None:
    """Refused by the filter in every tier (issue 23 §6); the full tier's IPC namespace would also end them."""
    before = Path("/proc/sysvipc/shm").read_text(encoding="ascii").splitlines()[1:]
    result = run_code(
        """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        segment = libc.shmget(0, 4096, 0o1666)  # IPC_PRIVATE | IPC_CREAT, never removed
        queue = libc.msgget(0, 0o1666)
        print(segment >= 0, queue >= 0)
        """.replace("\n        ", "\n"),
        limits=FULL,
    )
    assert result.stdout == "False False\n", result.stderr
    assert "ipcns" in result.isolation
    assert Path("/proc/sysvipc/shm").read_text(encoding="ascii").splitlines()[1:] == before


@needs_full
def test_pid_namespace_shows_only_the_run() -> None:
    result = run_code(
        "import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()), os.getppid())\n",
        limits=FULL,
    )
    pids, parent = result.stdout.split("] ")
    assert [int(pid) for pid in pids.strip("[").split(", ")] == [1, 2], result.stdout
    assert parent.strip() == "1"  # the reaper; the worker is not visible at all


@needs_full
def test_memory_is_limited_for_the_whole_run() -> None:
    """Six children touching 300 MiB each with memory_mb=512: no two hold their memory at the same time.

    Each survivor records when it held its block; on a slow machine one child can finish, exit, and let a
    later one through, so the check is on overlapping holds, not on how many children got there at all.
    """
    result = run_code(
        """
        import os, time
        children = []
        for _ in range(6):
            pid = os.fork()
            if pid == 0:
                try:
                    block = bytearray(300 * 1024 * 1024)
                    for offset in range(0, len(block), 4096):
                        block[offset] = 1
                    held_from = time.monotonic()
                    time.sleep(1.5)
                    block[0] = 2  # still held here
                    with open(f"held-{os.getpid()}", "w") as record:
                        record.write(f"{held_from} {time.monotonic()}")
                finally:
                    os._exit(0)
            children.append(pid)
            time.sleep(0.05)
        for pid in children:
            os.waitpid(pid, 0)
        holds = [open(name).read() for name in os.listdir(".") if name.startswith("held-")]
        print(";".join(holds))
        """.replace("\n        ", "\n"),
        limits=FULL,
    )
    assert result.status == "passed", result.stderr
    holds = [tuple(map(float, hold.split())) for hold in result.stdout.strip().split(";") if hold]
    assert holds, "no child could hold 300 MiB under a 512 MiB limit"
    overlapping = [(a, b) for i, a in enumerate(holds) for b in holds[i + 1 :] if a[0] < b[1] and b[0] < a[1]]
    assert not overlapping, f"two children held 300 MiB each at once under memory_mb=512: {overlapping}"
    assert "cgroup-memory-pids" in result.isolation


@pytest.fixture
def project_copies() -> Iterator[tuple[str, list[Path]]]:
    """Copies of the task bank in places the old sandbox left visible (it hid only the running checkout)."""
    token = "mtrlcopy" + secrets.token_hex(4)
    places = [Path("/opt"), Path("/srv"), Path("/var/tmp"), Path("/home")]
    made = []
    for place in places:
        copy = place / token / "environments" / "ask_to_code"
        copy.mkdir(parents=True)
        shutil.copy(TASK_BANK, copy / "tasks.py")
        made.append(place / token)
    yield token, made
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("tier", ["full", "fargate", "lambda"])
def test_no_copy_of_the_project_is_readable(tier: str, project_copies: tuple[str, list[Path]]) -> None:
    token, made = project_copies
    if tier == "full" and detect_tier() != "full":
        pytest.skip("needs root with CAP_SYS_ADMIN")
    site_packages = [path for path in filesystem_view().hide if path.endswith("-packages")]
    result = run_code(
        f"""
        import os
        found = []
        for place in {[str(path) for path in made]!r} + [{str(TASK_BANK)!r}]:
            try:
                found.append((place, os.listdir(place) if os.path.isdir(place) else open(place).read(10)))
            except OSError:
                pass
        for top in ("/opt", "/srv", "/var", "/home", "/work", "/app", "/root"):
            for root, dirs, files in os.walk(top):
                found += [os.path.join(root, name) for name in dirs + files if {token!r} in name]
        print(found)
        listed = []
        for path in {site_packages!r}:
            try:
                listed.append(sorted(os.listdir(path)))
            except OSError:  # absent, or (Landlock) not readable
                pass
        print(listed)
        """.replace("\n        ", "\n"),
        limits=Limits(timeout_s=20, cpu_s=15, isolation=tier),  # type: ignore[arg-type]
    )
    found, listed = result.stdout.splitlines()
    assert found == "[]", result.stdout
    if tier == "full":  # every site-packages of every interpreter is an empty directory
        assert listed.replace("[", "").replace("]", "").replace(",", "").strip() == "", listed
    else:  # Landlock: none can even be listed
        assert listed == "[]", listed


def test_the_program_receives_inputs_only() -> None:
    """What enters the sandbox per check: the function name and the arguments — nothing expected, no names."""
    from mtrl.sandbox import judge

    for task in TASKS:
        sent = json.loads(judge.check_inputs(task.cases))
        checks = [check for case in task.cases for check in case.checks]
        assert sent == [{"call": check.call, "args": judge.encode(list(check.args))} for check in checks]
