"""Runs inside the sandbox child (``python -I -S -B -c <this source>``). Standard library only.

Phase 1, still privileged: enter fresh network and mount namespaces (no interface is up, so even
loopback is unreachable), put a size-capped tmpfs at the work directory, make every other mount
read-only, hide /tmp-like scratch dirs behind throwaway tmpfs, set rlimits, drop to an unprivileged uid
that owns nothing on the host. Phase 2: read the program, tests and marker from stdin (never from disk,
so the program cannot read the hidden tests from its directory), then import the program as module
``solution`` and run every ``test*`` function, reporting each result on fd 3 prefixed with the marker.

Kept import-light on purpose (no json/traceback at start-up): interpreter start-up dominates latency.
"""

# ruff: noqa: S102, S108, S302, PLC0415 - exec of the untrusted program is the point; paths are mount targets
import contextlib
import marshal
import os
import resource
import sys
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
        if cfg["require_isolation"]:
            _fail_setup("unshare(network, mount): " + os.strerror(ctypes.get_errno()))
        return
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


def _flush_and_exit(code: int) -> None:
    # os._exit skips atexit handlers the program may have registered, so flush its output by hand.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):  # the program may have replaced or closed its streams
            stream.flush()
    os._exit(code)


def main() -> None:
    # Everything arrives on stdin (marshal: fast to load, no imports), then stdin is closed.
    cfg, marker, program, tests = marshal.loads(sys.stdin.buffer.read())
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if os.getuid() == 0:
        _isolate(cfg)
    _limit(cfg)
    _drop(cfg)
    out = os.write
    result_fd = cfg["result_fd"]

    def report(kind: str, name: str = "", detail: object = "") -> None:
        line = f"{marker} {kind} {name} {str(detail)[:500]!r}\n"
        out(result_fd, line.encode("utf-8", "replace"))

    def describe(error: BaseException) -> str:
        return f"{type(error).__name__}: {error}"

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
    namespace: dict[str, Any] = {"__name__": "hidden_tests", "solution": module}
    try:
        exec(compile(tests, "tests.py", "exec"), namespace)
    except BaseException as error:
        report("tests_error", "", describe(error))
        _flush_and_exit(0)
    names = [name for name, value in list(namespace.items()) if name.startswith("test") and callable(value)]
    report("tests", str(len(names)))
    for name in names:
        try:
            namespace[name]()
        except BaseException as error:
            report("fail", name, describe(error))
        else:
            report("pass", name)
    report("done")
    _flush_and_exit(0)


main()
