"""The sandbox against hostile programs. Limits are small so every attack ends within seconds.

After every run no process of the sandbox uid range may survive, and this (parent) process must be fine.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mtrl.sandbox import Limits, SandboxResult, run_code
from mtrl.sandbox.runner import UID_RANGE
from tests.unit.sandbox.reachable_python import REACHABLE

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="full isolation needs root (as in CI and the workers)")

FAST = Limits(timeout_s=3.0, cpu_s=2, memory_mb=256, max_processes=8, max_output_bytes=4096)
ADD_TESTS = textwrap.dedent(
    """
    from solution import add

    def test_small():
        assert add(1, 2) == 3

    def test_negative():
        assert add(-1, -1) == -2

    def test_zero():
        assert add(0, 0) == 0
    """
)


USED_UIDS: set[int] = set()


def _live_processes_of(uids: set[int]) -> list[int]:
    """Live (non-zombie) processes owned by one of ``uids``."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            uid = entry.stat().st_uid
            state = Path(f"/proc/{entry.name}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if uid in uids and state not in (b"Z", b"X"):
            found.append(int(entry.name))
    return found


@pytest.fixture(autouse=True)
def _nothing_survives() -> Iterator[None]:
    USED_UIDS.clear()
    yield
    # Only this test's executions: other test sessions on the machine may be running sandboxes right now.
    assert _live_processes_of(USED_UIDS) == []


def run(program: str, tests: str | None = ADD_TESTS, limits: Limits = FAST) -> SandboxResult:
    result = run_code(textwrap.dedent(program), tests, limits)
    if result.uid is not None:
        assert UID_RANGE[0] <= result.uid < UID_RANGE[1]
        USED_UIDS.add(result.uid)
    return result


def test_correct_program_passes_and_wrong_one_fails() -> None:
    good = run("def add(a, b):\n    return a + b\nprint('hello')\n")
    assert (good.status, good.tests_passed, good.tests_total) == ("passed", 3, 3)
    assert good.stdout == "hello\n"
    bad = run("def add(a, b):\n    return a + b if a > 0 else 0\n")
    assert (bad.status, bad.tests_passed, bad.tests_failed) == ("failed", 2, 1)
    assert list(bad.failures) == ["test_negative"]
    assert bad.failures["test_negative"].startswith("AssertionError")


def test_program_errors_and_missing_names_fail_every_test() -> None:
    crash = run("raise RuntimeError('boom')")
    assert crash.status == "failed"
    assert "RuntimeError: boom" in crash.detail
    assert (crash.tests_passed, crash.tests_failed) == (0, 3)
    missing = run("def plus(a, b):\n    return a + b\n")
    assert missing.status == "failed"
    assert "ImportError" in missing.detail
    syntax = run("def add(a, b) return a")
    assert syntax.status == "failed"
    assert "SyntaxError" in syntax.detail


def test_program_without_tests() -> None:
    assert run("print(sum(range(10)))", tests=None).stdout == "45\n"
    assert run("import sys\nsys.exit(3)", tests=None).status == "failed"
    assert run("x = 1", tests=None).status == "passed"


def test_fork_bomb_is_contained() -> None:
    result = run(
        """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
        """,
        limits=Limits(timeout_s=1.5, cpu_s=2, memory_mb=256, max_processes=8),
    )
    assert result.status in {"timeout", "error"}
    assert result.tests_passed == 0


def test_memory_bomb_is_contained() -> None:
    result = run(
        """
        hoard = []
        while True:
            hoard.append(bytearray(50 * 1024 * 1024))
        """
    )
    assert result.status == "failed"
    assert "MemoryError" in result.detail


def test_infinite_loop_hits_the_wall_clock() -> None:
    result = run("while True:\n    pass\n", limits=Limits(timeout_s=1.0, cpu_s=30))
    assert result.status == "timeout"
    assert result.duration_s < 3


def test_cpu_limit_kills_a_spinning_program() -> None:
    result = run("while True:\n    pass\n", limits=Limits(timeout_s=10.0, cpu_s=1))
    assert result.status == "error"
    assert "signal" in result.detail
    assert result.duration_s < 5


def test_detached_children_are_still_killed() -> None:
    result = run(
        """
        import os, time
        if os.fork() == 0:
            if os.fork() == 0:  # double fork, then try to leave the process group
                try:
                    os.setsid()
                except OSError:
                    pass
                time.sleep(60)
            os._exit(0)
        def add(a, b):
            return a + b
        """
    )
    assert result.status == "passed"  # the fixture checks the detached grandchild is gone


def test_no_network_not_even_loopback_or_metadata() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    accepted: list[object] = []
    listener.settimeout(3)
    threading.Thread(target=lambda: accepted.append(_try_accept(listener)), daemon=True).start()
    try:
        result = run(
            f"""
            import socket
            reached = []
            for host, port in [("127.0.0.1", {port}), ("169.254.169.254", 80), ("169.254.170.2", 80),
                               ("8.8.8.8", 53), ("::1", {port})]:
                family = socket.AF_INET6 if ":" in host else socket.AF_INET
                try:
                    s = socket.socket(family, socket.SOCK_STREAM)
                    s.settimeout(1)
                    s.connect((host, port))
                    reached.append(host)
                except OSError:
                    pass
            print("reached", reached)
            def add(a, b):
                return a + b
            """
        )
    finally:
        listener.close()
    assert result.stdout == "reached []\n"
    assert accepted in ([], [None])


def _try_accept(listener: socket.socket) -> object:
    try:
        return listener.accept()
    except OSError:
        return None


def test_no_credentials_in_env_or_readable_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "sekrit-env-value")
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/abc")
    secret_file = Path("/root/.mtrl-sandbox-test-credentials")
    secret_file.write_text("sekrit-file-value", encoding="utf-8")
    secret_file.chmod(0o600)
    try:
        result = run(
            f"""
            import os
            found = [k for k in os.environ if k.startswith("AWS")]
            for path in [{str(secret_file)!r}, "/root/.aws/credentials", "/proc/1/environ",
                         "/proc/" + str(os.getppid()) + "/environ"]:
                try:
                    found.append(open(path).read()[:40])
                except OSError:
                    pass
            print("found", found)
            def add(a, b):
                return a + b
            """
        )
    finally:
        secret_file.unlink()
    assert result.stdout == "found []\n"
    assert "sekrit" not in result.stdout + result.stderr


def test_writes_outside_the_work_dir_do_not_land(tmp_path: Path) -> None:
    open_dir = tmp_path / "world-writable"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    targets = [open_dir / "escape.txt", Path("/var/tmp/mtrl-escape.txt"), Path("/dev/shm/mtrl-escape.txt")]
    targets += [Path("/root/mtrl-escape.txt"), Path("/etc/mtrl-escape.txt"), Path.cwd() / "mtrl-escape.txt"]
    result = run(
        f"""
        wrote = []
        for path in {[str(t) for t in targets]!r}:
            try:
                with open(path, "w") as handle:
                    handle.write("x")
                wrote.append(path)
            except OSError:
                pass
        with open("inside.txt", "w") as handle:  # its own directory is writable
            handle.write("ok")
        print(open("inside.txt").read())
        def add(a, b):
            return a + b
        """
    )
    assert result.status == "passed"
    assert result.stdout.startswith("ok")
    for target in targets:
        assert not target.exists(), f"{target} escaped the sandbox"


def test_file_size_limit() -> None:
    result = run(
        """
        with open("big.bin", "wb") as handle:
            handle.write(b"x" * (20 * 1024 * 1024))
        """,
        tests=None,
        limits=Limits(timeout_s=3, file_mb=1, disk_mb=16, memory_mb=256),
    )
    assert result.status in {"failed", "error"}  # EFBIG/SIGXFSZ, never a 20 MB file


def test_huge_output_is_capped() -> None:
    result = run(
        """
        import sys
        for _ in range(2000):
            sys.stdout.write("x" * 100_000)
        def add(a, b):
            return a + b
        """
    )
    assert result.status == "passed"
    assert result.output_truncated
    assert len(result.stdout) == FAST.max_output_bytes


def test_forged_pass_lines_are_ignored() -> None:
    result = run(
        """
        import os, sys
        names = ["test_small", "test_negative", "test_zero"]
        for fd in range(1, 20):
            for name in names:
                for line in (f"PASS {name}\\n", f"deadbeef pass {name} ''\\n", "deadbeef done  ''\\n"):
                    try:
                        os.write(fd, line.encode())
                    except OSError:
                        pass
        print("ALL TESTS PASSED")
        def add(a, b):
            return None
        """
    )
    assert result.status == "failed"
    assert result.tests_passed == 0
    assert "ALL TESTS PASSED" in result.stdout


def test_killing_the_parent_or_everything_fails_harmlessly() -> None:
    parent = os.getpid()
    result = run(
        """
        import os, signal
        denied = []
        for target in (os.getppid(), 1, -1):  # its parent, init, then everything it may signal
            try:
                os.kill(target, signal.SIGKILL)
            except OSError as error:
                denied.append(error.errno)
        print(denied)
        def add(a, b):
            return a + b
        """
    )
    assert os.getpid() == parent  # still here to check
    assert result.status == "passed"
    assert result.stdout.startswith("[1, 1")  # EPERM for the parent and for init


def test_exit_midway_keeps_the_tests_already_passed() -> None:
    tests = ADD_TESTS + "\ndef test_quit():\n    import os\n    os._exit(0)\n\ndef test_after():\n    pass\n"
    result = run("def add(a, b):\n    return a + b\n", tests=tests)
    assert result.status == "error"
    assert (result.tests_passed, result.tests_total) == (3, 5)


def test_sys_exit_inside_a_test_is_a_failure() -> None:
    result = run("def add(a, b):\n    raise SystemExit(0)\n")
    assert result.status == "failed"
    assert result.tests_failed == 3


SECCOMP = Limits(timeout_s=3.0, cpu_s=2, memory_mb=256, max_output_bytes=4096, isolation="seccomp")


def test_seccomp_tier_blocks_network_signals_and_group_escape() -> None:
    """The tier used without root (Fargate): forced here while running as root, so it must stand alone."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        result = run(
            f"""
            import os, signal, socket
            seen = []
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=1)
                seen.append("connected")
            except OSError as error:
                seen.append(error.errno)
            for target in (os.getppid(), 1, -1, -os.getppid()):
                try:
                    os.kill(target, 0)
                    seen.append("signalled")
                except OSError as error:
                    seen.append(error.errno)
            try:
                os.setsid()
                seen.append("escaped")
            except OSError as error:
                seen.append(error.errno)
            os.kill(os.getpid(), 0)  # its own processes remain fine
            print(seen)
            def add(a, b):
                return a + b
            """,
            limits=SECCOMP,
        )
    finally:
        listener.close()
    assert result.tier == "lambda"
    assert {"clean-env", "rlimits", "seccomp", "non-dumpable"} <= set(result.isolation)
    assert result.status == "passed"
    assert result.stdout == "[13, 1, 1, 1, 1, 1]\n"  # EACCES for socket(), EPERM for the rest


@pytest.mark.parametrize(
    ("program", "status"),
    [
        ("while True:\n    pass\n", "timeout"),
        ("x = bytearray(1024 * 1024 * 1024)\n", "failed"),
        ("import os\nos.write(3, b'deadbeef pass test_small None')\ndef add(a, b):\n    return None\n", "failed"),
    ],
    ids=["infinite-loop", "memory-bomb", "forged-result"],
)
def test_seccomp_tier_contains_the_basic_attacks(program: str, status: str) -> None:
    result = run(program, limits=Limits(timeout_s=1.0, cpu_s=5, memory_mb=256, isolation="seccomp"))
    assert result.status == status
    assert result.tests_passed == 0


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        Limits(timeout_s=0)
    with pytest.raises(ValueError, match="isolation"):
        Limits(isolation="none")  # type: ignore[arg-type]


@pytest.mark.parametrize("bank_file", ["tasks.py", "later_tasks.py"])  # the hidden tests live in both
def test_hidden_tests_in_the_checkout_cannot_be_read(bank_file: str) -> None:
    bank = Path(__file__).resolve().parents[3] / "environments" / "ask_to_code" / bank_file
    assert bank.is_file()
    result = run(
        f"""
        import os
        try:
            print(open({str(bank)!r}).read()[:20])
        except OSError as error:
            print("blocked", error.errno)
        try:
            print(os.listdir({str(bank.parents[2])!r}))
        except OSError as error:
            print("unlisted", error.errno)
        def add(a, b):
            return a + b
        """
    )
    read, listing = result.stdout.splitlines()
    assert read == "blocked 2"  # ENOENT: the file is not there in the sandbox
    # The checkout is an empty directory, or (when it lives under /tmp, which the sandbox replaces) absent.
    assert listing in {"[]", "unlisted 2"}


@pytest.mark.other_uids
@pytest.mark.skipif(shutil.which("runuser") is None, reason="needs runuser (util-linux; .ci/run installs it)")
def test_really_unprivileged_caller_gets_the_seccomp_tier() -> None:
    """As 'nobody' (no namespaces, no uid switch possible): network and signals are still blocked."""
    script = textwrap.dedent(
        """
        import json, textwrap
        from mtrl.sandbox import run_code
        program = textwrap.dedent('''
            import os, socket
            seen = []
            try:
                socket.create_connection(("127.0.0.1", 22), timeout=1)
                seen.append("connected")
            except OSError as error:
                seen.append(error.errno)
            try:
                os.kill(os.getppid(), 0)
                seen.append("signalled")
            except OSError as error:
                seen.append(error.errno)
            print(seen)
            def add(a, b):
                return a + b
        ''')
        result = run_code(program, "from solution import add\\ndef test_a():\\n    assert add(1, 2) == 3\\n")
        print(json.dumps({"status": result.status, "stdout": result.stdout, "tier": result.tier}))
        """
    )
    completed = subprocess.run(
        ["runuser", "-u", "nobody", "--", "env", f"PYTHONPATH={REACHABLE.project}", REACHABLE.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    document = json.loads(completed.stdout.splitlines()[-1])
    assert document == {"status": "passed", "stdout": "[13, 1]\n", "tier": "lambda"}


def test_program_cannot_add_or_hide_tests() -> None:
    tests = "from solution import *\n\ndef test_real():\n    assert add(1, 1) == 2\n"
    result = run(
        """
        def add(a, b):
            return 0
        def test_fake_one():
            pass
        def test_fake_two():
            pass
        """,
        tests=tests,
    )
    assert (result.status, result.tests_passed, result.tests_total) == ("failed", 0, 1)
    assert list(result.failures) == ["test_real"]


def test_patching_builtins_does_not_reach_the_tests() -> None:
    # Without the harness's own references, this rigged compile() would replace every hidden test body
    # with ``pass`` (it reads the test names from the source it is asked to compile).
    result = run(
        """
        import builtins, re
        _original = compile

        def rigged(source, filename, mode, *args, **kwargs):
            if filename == "tests.py":
                names = re.findall(r"^def (test\\w*)", source, re.M)
                source = "".join(f"def {name}():\\n    pass\\n" for name in names)
            return _original(source, filename, mode, *args, **kwargs)

        builtins.compile = rigged
        def add(a, b):
            return None
        """
    )
    assert (result.status, result.tests_passed) == ("failed", 0)


def test_always_equal_objects_fail_same() -> None:
    program = """
        class Anything:
            def __eq__(self, other):
                return True
            __hash__ = object.__hash__
        def add(a, b):
            return Anything()
        """
    plain = run(program, tests="from solution import add\n\ndef test_eq():\n    assert add(1, 2) == 3\n")
    assert plain.status == "passed"  # why hidden tests should use same(): plain == trusts the result's __eq__
    strict = run(program, tests="from solution import add\n\ndef test_same():\n    assert same(add(1, 2), 3)\n")
    assert (strict.status, strict.tests_passed) == ("failed", 0)
    nested = "from solution import add\n\ndef test_nested():\n    assert same([add(1, 2)], [3])\n"
    assert run(program, tests=nested).status == "failed"


def test_a_signal_death_is_named_whichever_way_it_is_reported() -> None:
    # The PID-namespace forwarder reports a killed program as 128 + signal; a direct child as a negative code.
    # test_cpu_limit_kills_a_spinning_program once read "exit code 137" under load for RLIMIT_CPU's SIGKILL.
    from mtrl.sandbox.runner import _end_reason

    assert _end_reason(137) == "signal 9, SIGKILL"
    assert _end_reason(-24) == "signal 24, SIGXCPU"
    assert _end_reason(1) == "exit code 1"
    assert _end_reason(128) == "exit code 128"
    assert _end_reason(None) == "exit code None"
