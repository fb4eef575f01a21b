"""Runs inside the sandbox child. Standard library only.

The parent compiles this file once and sends the code object, marshalled with the data, on stdin to a
one-line bootstrap (``python -I -S -B -c runner.BOOTSTRAP``): compiling it per execution would cost ~7 ms.

Phase 1 (as root, ``namespaces``): enter fresh network and mount namespaces (no interface is up, so even
loopback is unreachable), put a size-capped tmpfs at the work directory, make every other mount
read-only, hide /tmp-like scratch dirs behind throwaway tmpfs, set rlimits, drop to an unprivileged uid
that owns nothing on the host. Always, last: a seccomp filter (no sockets, no signals to the worker, no
leaving the process group) — without root it is the network barrier on its own.

Phase 2: read the program, tests and marker from stdin (never from disk,
so the program cannot read the hidden tests from its directory), then import the program as module
``solution`` and run every ``test*`` function, reporting each result on fd 3 prefixed with the marker.

Kept import-light on purpose (no json/traceback at start-up): interpreter start-up dominates latency.
"""

# ruff: noqa: S102, S108, PLC0415 - exec of the untrusted program is the point; paths are mount targets
from __future__ import annotations

import builtins
import os
import resource
import sys

# Importing typing (or contextlib) would cost ~25 ms of interpreter start-up per execution; annotations
# are never evaluated at run time, so the name is only needed by the type checker.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
KEEP_WRITABLE = ("/proc", "/sys", "/dev")


def _fail_setup(message: str) -> None:
    os.write(2, ("sandbox setup failed: " + message + "\n").encode())
    os._exit(125)


def _isolate(cfg: dict[str, Any]) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def enc(value: str | None) -> bytes | None:
        return None if value is None else value.encode()

    def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> str | None:
        if libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
            return os.strerror(ctypes.get_errno())
        return None

    uid = cfg["uid"]
    if libc.unshare(CLONE_NEWNET | CLONE_NEWNS) != 0:
        _fail_setup("unshare(network, mount): " + os.strerror(ctypes.get_errno()))
    error = mount("none", "/", None, MS_REC | MS_PRIVATE, None)
    if error:
        _fail_setup("mount private: " + error)
    work = cfg["workdir"]
    size = f"size={cfg['disk_mb']}m,nr_inodes={cfg['max_files']},mode=0700,uid={uid},gid={uid}"
    error = mount("tmpfs", work, "tmpfs", MS_NOSUID | MS_NODEV, size)
    if error:
        _fail_setup("tmpfs work dir: " + error)
    os.chdir(work)
    with open("/proc/self/mountinfo") as handle:
        points = [line.split()[4] for line in handle]
    for point in points:
        if point == work or (point.startswith(KEEP_WRITABLE) and point != "/dev/shm"):
            continue
        # Bind-remount keeps each mount's own flags; add read-only (ignore mounts that refuse).
        mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
    for scratch in SCRATCH_DIRS:
        if os.path.isdir(scratch):
            mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, f"size={cfg['disk_mb']}m,nr_inodes=256")
    _hide_root_home(mount)
    stdlib = os.path.dirname(os.__file__)
    for hidden in cfg["hide"]:
        # The project checkout holds the hidden tests and reference solutions: make it an empty directory.
        if os.path.isdir(hidden) and not stdlib.startswith(hidden.rstrip("/") + "/"):
            mount("tmpfs", hidden, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=1m,mode=0755")


def _hide_root_home(mount: Any) -> None:
    """Replace /root with an empty tmpfs (no dotfiles, no credentials), keeping the stdlib if it lives there.

    The unprivileged uid could not read /root anyway; but when the interpreter itself is installed under
    /root (pyenv), its standard library must stay importable, so it is bind-mounted back read-only.
    """
    stdlib = os.path.dirname(os.__file__)
    keep = [stdlib] if stdlib.startswith("/root/") else []  # lib-dynload is inside it
    handles = [os.open(path, os.O_RDONLY | os.O_DIRECTORY) for path in keep]
    if mount("tmpfs", "/root", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755") is not None:
        return
    for path, handle in zip(keep, handles, strict=True):
        os.makedirs(path, mode=0o755, exist_ok=True)
        source = f"/proc/self/fd/{handle}"
        if mount(source, path, None, MS_BIND, None) is None:
            mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
        os.close(handle)
    mount(None, "/root", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=1m,mode=0755")


def _limit(cfg: dict[str, Any]) -> None:
    limits = (
        (resource.RLIMIT_CPU, cfg["cpu_s"]),
        (resource.RLIMIT_AS, cfg["memory_mb"] * 1024 * 1024),
        (resource.RLIMIT_NPROC, cfg["max_processes"]),
        (resource.RLIMIT_FSIZE, cfg["file_mb"] * 1024 * 1024),
        (resource.RLIMIT_NOFILE, cfg["max_open_files"]),
        (resource.RLIMIT_CORE, 0),
    )
    for which, value in limits:
        resource.setrlimit(which, (value, value))


def _drop(cfg: dict[str, Any]) -> None:
    uid = cfg["uid"]
    if os.getuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        if os.getuid() != uid or os.geteuid() != uid:
            _fail_setup("could not drop privileges")


# seccomp-BPF (works without privileges, e.g. on Fargate where namespaces are unavailable).
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
SYSCALLS = {
    # name: (x86_64, aarch64)
    "socket": (41, 198),
    "kill": (62, 129),
    "tkill": (200, 130),
    "tgkill": (234, 131),
    "setsid": (112, 157),
    "setpgid": (109, 154),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "pidfd_open": (434, 434),
    "pidfd_send_signal": (424, 424),
    "pidfd_getfd": (438, 438),
    "io_uring_setup": (425, 425),
    "unshare": (272, 97),
    "setns": (308, 268),
    "mount": (165, 40),
}
_RET_KILL, _RET_ALLOW = 0x80000000, 0x7FFF0000
_EPERM, _EACCES = 0x00050000 | 1, 0x00050000 | 13


def _seccomp() -> None:
    """No network sockets, no signals to the worker or init or everyone, no escaping the process group.

    ``socket()`` fails with EACCES for every family (``socketpair`` still works), so no connection of any
    kind can be made; kill/tkill/tgkill aimed at the worker, init, -1 or another process group fail with
    EPERM; setsid/setpgid, ptrace, process_vm_*, pidfd_*, io_uring and namespace calls fail with EPERM.
    """
    import ctypes

    machine = os.uname().machine
    if machine not in AUDIT_ARCH:
        _fail_setup(f"seccomp: unsupported architecture {machine}")
    column = 0 if machine == "x86_64" else 1
    own_group = os.getpgrp()
    program: list[tuple[int, int, int, int]] = [
        (0x20, 0, 0, 4),  # A = arch
        (0x15, 1, 0, AUDIT_ARCH[machine]),
        (0x06, 0, 0, _RET_KILL),
        (0x20, 0, 0, 0),  # A = syscall number
        (0x35, 0, 1, 0x40000000),  # x32 ABI numbers: refuse outright
        (0x06, 0, 0, _RET_KILL),
    ]
    worker = os.getppid()
    for name in ("kill", "tkill", "tgkill"):
        # A = low 32 bits of the target pid. Deny the worker, init, -1 (everyone) and other process groups
        # (negative targets other than -own_group); allow everything else (its own processes).
        block = [
            (0x20, 0, 0, 16),  # 0: A = args[0]
            (0x15, 5, 0, worker),  # 1: -> 7 deny
            (0x15, 4, 0, 1),  # 2: -> 7 deny
            (0x15, 3, 0, 0xFFFFFFFF),  # 3: -> 7 deny
            (0x15, 1, 0, (-own_group) & 0xFFFFFFFF),  # 4: -> 6 allow
            (0x35, 1, 0, 0x80000000),  # 5: negative -> 7 deny
            (0x06, 0, 0, _RET_ALLOW),  # 6
            (0x06, 0, 0, _EPERM),  # 7
        ]
        program.append((0x15, 0, len(block), SYSCALLS[name][column]))
        program += block
    for name in SYSCALLS:
        if name in ("kill", "tkill", "tgkill"):
            continue
        program.append((0x15, 0, 1, SYSCALLS[name][column]))
        program.append((0x06, 0, 0, _EACCES if name == "socket" else _EPERM))
    program.append((0x06, 0, 0, _RET_ALLOW))

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    filters = (Filter * len(program))(*[Filter(*instruction) for instruction in program])
    fprog = Program(len(program), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        _fail_setup("prctl(NO_NEW_PRIVS): " + os.strerror(ctypes.get_errno()))
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        _fail_setup("seccomp filter: " + os.strerror(ctypes.get_errno()))


# Available to hidden tests as ``same(actual, expected)``. Defined inside the tests' namespace (so it sees
# the builtins snapshot, not what the program patched). Exact types, recursively: an object whose __eq__
# always answers True — the classic way to "pass" ``assert f(x) == y`` — fails it.
SAME_SOURCE = """
def same(actual, expected):
    if type(actual) is not type(expected):
        return False
    if type(expected) in (list, tuple):
        return len(actual) == len(expected) and all(same(a, e) for a, e in zip(actual, expected))
    if type(expected) is dict:
        return len(actual) == len(expected) and all(
            any(same(k, key) for k in actual) and same(actual[key], value) for key, value in expected.items()
        )
    if type(expected) in (set, frozenset):
        return len(actual) == len(expected) and all(any(same(a, e) for a in actual) for e in expected)
    return actual == expected
"""


def _flush_and_exit(code: int) -> None:
    # os._exit skips atexit handlers the program may have registered, so flush its output by hand.
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 - contextlib would cost start-up time
            stream.flush()
        except BaseException:  # noqa: S110 - the program may have replaced or closed its streams
            pass
    os._exit(code)


def main(data: tuple[Any, ...]) -> None:
    cfg, marker, program, tests, names = data
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if cfg["namespaces"]:
        _isolate(cfg)
    _limit(cfg)
    if cfg["namespaces"]:
        _drop(cfg)
    _seccomp()  # last: it forbids mount/unshare, which _isolate needs
    out = os.write
    result_fd = cfg["result_fd"]

    def report(kind: str, name: str = "", detail: object = "") -> None:
        line = f"{marker} {kind} {name} {str(detail)[:500]!r}\n"
        out(result_fd, line.encode("utf-8", "replace"))

    def describe(error: BaseException) -> str:
        return f"{type(error).__name__}: {error}"

    # Taken before the program runs: a program that patches builtins (or exec/compile) cannot change how
    # the hidden tests are compiled, run or judged.
    run_code, compile_code = exec, compile
    clean_builtins = dict(vars(builtins))
    module = type(sys)("solution")  # a plain module object, without importing ``types``
    module.__file__ = "solution.py"
    sys.modules["solution"] = module
    try:
        exec(compile(program, "solution.py", "exec"), module.__dict__)
    except SystemExit as stop:
        if stop.code not in (None, 0):
            report("program_failed", "", f"SystemExit({stop.code!r})")
            _flush_and_exit(0)
    except BaseException as error:  # the program is untrusted: any failure is a result, not a crash
        report("program_failed", "", describe(error))
        _flush_and_exit(0)
    if tests is None:
        report("program_ok")
        _flush_and_exit(0)
    namespace: dict[str, Any] = {"__name__": "hidden_tests", "__builtins__": clean_builtins, "solution": module}
    try:
        run_code(compile_code(SAME_SOURCE, "mtrl-sandbox-same", "exec"), namespace)
        run_code(compile_code(tests, "tests.py", "exec"), namespace)
    except BaseException as error:
        report("tests_error", "", describe(error))
        _flush_and_exit(0)
    report("tests", str(len(names)))
    for name in names:  # the parent's list, read from the test source: nothing the program defined
        try:
            namespace[name]()
        except BaseException as error:
            report("fail", name, describe(error))
        else:
            report("pass", name)
    report("done")
    _flush_and_exit(0)


# The bootstrap (runner.BOOTSTRAP) read this code, precompiled, and DATA from stdin, then closed stdin.
main(globals()["DATA"])
