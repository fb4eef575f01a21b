"""Runs inside the sandbox child. Standard library only; holds nothing the program must not see.

The parent compiles this file (and ``_seccomp.py``, run first in the same namespace) once and sends the code
objects, marshalled with the data, on stdin to a one-line bootstrap (``python -I -S -B -c runner.BOOTSTRAP``):
compiling them per execution would cost ~7 ms.

Phase 1, per tier (``cfg["tier"]``):
- ``full`` (root with CAP_SYS_ADMIN): join the run's memory+pids cgroup; fresh network, mount, IPC, UTS and
  PID namespaces; a new root file system built from the allow-list (``filesystem.py``: the interpreter, the
  files it maps, its standard library without site-packages, a few device nodes, a fresh /proc), a
  size-capped tmpfs work directory and /tmp; a reaper as PID 1 (when it ends, the kernel kills everything
  left in the namespace); then the program process: its own session, rlimits, a fresh unprivileged uid.
- ``fargate`` (root without CAP_SYS_ADMIN): rlimits, the run's own throwaway uid (RLIMIT_NPROC counts only
  it), Landlock: read only the allow-list, write nothing.
- ``lambda`` (no CAP_SETUID): rlimits, non-dumpable, Landlock as fargate (also scoping signals and abstract
  sockets on ABI 6+); code that keeps uid 0 may start threads but no processes (see ``_seccomp.py``).
Every tier: the OOM killer's first choice (oom_score_adj 1000), every capability set emptied (bounding set
too when this process may: CAP_SETPCAP), then last the seccomp filter (``_seccomp.py``).

Phase 2: import the program as module ``solution``; then, per mode, either nothing more (``program``), the
hidden-test source in the same interpreter (``tests``: a developer tool, NOT forgery-proof — see runner), or
``cases``: call each requested function with the JSON-decoded inputs and write one JSON answer per call on the
answer descriptor. The expected values never reach this process: the judge (``judge.py``) compares.

Kept import-light on purpose (no json/re/traceback): interpreter start-up dominates latency.
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
    from collections.abc import Callable
    from typing import Any

    from mtrl.sandbox._seccomp import install_seccomp  # at run time: defined by _seccomp.py, run first

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
DEVICES = ("null", "zero", "full", "random", "urandom")


def _fail_setup(message: str) -> None:
    os.write(2, ("sandbox setup failed: " + message + "\n").encode())
    os._exit(125)


def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _join_cgroups(cfg: dict[str, Any]) -> None:
    for directory in cfg["cgroups"]:
        try:
            with open(directory + "/cgroup.procs", "w") as handle:
                handle.write(str(os.getpid()))
        except OSError as error:
            _fail_setup(f"join cgroup {directory}: {error}")


def _full_tier(cfg: dict[str, Any]) -> None:
    """Namespaces, the allow-listed root and a reaper as PID 1; returns in the program process."""
    import ctypes

    libc = _libc()
    _join_cgroups(cfg)
    flags = CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID
    if libc.unshare(flags) != 0:
        _fail_setup("unshare(net, mount, ipc, uts, pid): " + os.strerror(ctypes.get_errno()))
    _supervise(os.fork(), group=False)  # the child is PID 1 of the new PID namespace
    _build_root(cfg, libc, ctypes)
    _supervise(os.fork(), group=False)  # PID 1 stays a reaper; the program runs in its child
    os.setsid()  # its own session and group: what the seccomp filter lets it signal


def _supervise(child: int, *, group: bool) -> None:
    """In the parent: wait for ``child`` and exit with its status (a signal death as 128 + signal).

    SIGTERM (the worker's deadline) kills ``child`` — with ``group``, its whole process group. With ``group``
    this process is a child subreaper, every descendant of ``child`` stays in that group (the filter forbids
    leaving it), and once ``child`` is done the group is killed and every descendant reaped before exiting:
    nothing the program started outlives the run, not even as a zombie of whoever would inherit it.
    """
    if child == 0:
        return
    import _signal  # type: ignore[import-not-found]  # the C module: ``signal`` would import enum

    def stop(*_: object) -> None:
        try:  # noqa: SIM105 - contextlib would cost start-up time
            (os.killpg if group else os.kill)(child, 9)
        except OSError:
            pass

    _signal.signal(15, stop)
    null = os.open(os.devnull, os.O_WRONLY)
    for descriptor in (1, 2):  # the program's output must reach EOF when the program is done
        os.dup2(null, descriptor)
    os.closerange(3, 256)
    code = -1
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(max(code, 0))
        if pid == child:
            code = os.waitstatus_to_exitcode(status) & 0xFF if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
            if not group:
                os._exit(code)
        if code >= 0:
            stop()


def _reaper(libc: Any) -> None:
    """Outside the full tier: this process stays behind as the program's subreaper; returns in the program."""
    import ctypes

    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER: orphans of the program come back to us
        _fail_setup("PR_SET_CHILD_SUBREAPER: " + os.strerror(ctypes.get_errno()))
    child = os.fork()
    if child == 0:
        os.setpgid(0, 0)  # its own group: all the filter lets it signal, and what the reaper ends
        return
    try:  # noqa: SIM105 - also from this side, so the group exists before anything may kill it
        os.setpgid(child, child)
    except OSError:
        pass
    _supervise(child, group=True)


def _build_root(cfg: dict[str, Any], libc: Any, ctypes: Any) -> None:
    def enc(value: str | None) -> bytes | None:
        return None if value is None else value.encode()

    def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
        if libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
            _fail_setup(f"mount {target}: " + os.strerror(ctypes.get_errno()))

    def bind_readonly(path: str, target: str, flags: int = MS_NOSUID | MS_NODEV) -> None:
        mount(path, target, None, MS_BIND | MS_REC, None)
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags, None)

    mount("none", "/", None, MS_REC | MS_PRIVATE, None)
    root = cfg["root_dir"]
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")
    # One tmpfs holds everything the program may write (/tmp and its work directory): disk_mb and max_files
    # bound the run as a whole. Mounted first, so an interpreter kept under /tmp is bound inside it, not hidden.
    uid = cfg["uid"]
    size = f"size={cfg['disk_mb']}m,nr_inodes={cfg['max_files']},mode=0700,uid={uid},gid={uid}"
    os.mkdir(root + "/tmp")
    mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, size)
    # Every path here is real (no symlink on the way), so what is made stays inside the new root. The parent
    # listed every directory to make, parents first (``skeleton``): no existence checks here.
    for path in cfg["skeleton"]:
        os.mkdir(root + path, 0o755)
    for path in cfg["directories"]:
        bind_readonly(path, root + path)
    for path in cfg["files"]:
        os.close(os.open(root + path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
        bind_readonly(path, root + path)
    for path, target in cfg["links"]:
        os.symlink(target, root + path)
    for hidden in cfg["hide"]:
        if os.path.isdir(root + hidden):  # every site-packages and copy of the project: an empty directory
            mount("tmpfs", root + hidden, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=0755")
    for device in DEVICES:
        os.close(os.open(root + "/dev/" + device, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
        bind_readonly("/dev/" + device, root + "/dev/" + device, MS_NOSUID)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1")):
        os.symlink(target, root + "/dev/" + name)
    os.symlink("/proc/self/fd/2", root + "/dev/stderr")
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)  # this PID namespace only
    workdir = cfg["workdir"]
    inside_tmp = workdir.startswith("/tmp/")
    storage = root + (workdir if inside_tmp else "/tmp/.work")
    os.makedirs(storage, exist_ok=True)
    os.chown(storage, uid, uid)
    if not inside_tmp:  # elsewhere (TMPDIR): the same tmpfs, bound there
        os.makedirs(root + workdir, exist_ok=True)
        mount(storage, root + workdir, None, MS_BIND, None)
    os.chdir(root)
    os.chroot(".")
    os.chdir(cfg["workdir"])
    sys.executable = cfg["executable"]


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


PR_CAPBSET_READ, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, CAP_SETPCAP = 23, 24, 47, 4, 8


def _drop(cfg: dict[str, Any], libc: Any) -> None:
    """Leave no capability in any set; switch to the run's own uid where there is one."""
    import ctypes

    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    sets = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable (low words), then the high words
    if libc.capget(header, sets) != 0:
        _fail_setup("capget: " + os.strerror(ctypes.get_errno()))
    had_setpcap = sets[0] >> CAP_SETPCAP & 1
    capability = 0
    # The bounding set (what any later execve could grant): drop up to the first number the kernel does not know.
    while had_setpcap and libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) == 0:
        capability += 1
    if had_setpcap and (capability < 32 or any(libc.prctl(PR_CAPBSET_READ, n, 0, 0, 0) for n in range(capability))):
        _fail_setup("drop the capability bounding set: " + os.strerror(ctypes.get_errno()))
    uid = cfg["uid"]
    if os.getuid() == 0 and uid != 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)  # from root to another uid: the permitted, effective and ambient sets are emptied
        if os.getuid() != uid or os.geteuid() != uid or os.getgid() != uid:
            _fail_setup("could not drop privileges")
    if libc.capset(header, (ctypes.c_uint32 * 6)()) != 0:  # inheritable survives setuid; a kept uid keeps all
        _fail_setup("capset: " + os.strerror(ctypes.get_errno()))
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)  # (EINVAL: a kernel without ambient sets)
    ambient = [n for n in range(64) if libc.prctl(PR_CAP_AMBIENT, 1, n, 0, 0) == 1]  # PR_CAP_AMBIENT_IS_SET
    if libc.capget(header, sets) != 0 or any(sets) or ambient:
        _fail_setup("capabilities left: " + " ".join(str(value) for value in sets))


def _landlock(cfg: dict[str, Any]) -> None:
    """Restrict this process with the worker's ruleset (``landlock.py``): read the allow-list, write nothing."""
    import ctypes

    libc = _libc()
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS (required for an unprivileged restrict_self)
        _fail_setup("prctl(NO_NEW_PRIVS): " + os.strerror(ctypes.get_errno()))
    if libc.syscall(446, cfg["landlock_fd"], 0) != 0:  # landlock_restrict_self
        _fail_setup("landlock restrict: " + os.strerror(ctypes.get_errno()))
    os.close(cfg["landlock_fd"])


def _flush_and_exit(code: int) -> None:
    # os._exit skips atexit handlers the program may have registered, so flush its output by hand.
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 - contextlib would cost start-up time
            stream.flush()
        except BaseException:  # noqa: S110 - the program may have replaced or closed its streams
            pass
    os._exit(code)


# The program side of the wire format in judge.py (kept in sync by tests/unit/sandbox/test_judge.py).
def _encode(value: Any, text: Callable[[str], str]) -> str:  # noqa: PLR0911 - one return per type
    kind = type(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is str:
        return text(value)
    if kind is int:
        return str(value)
    if kind is float:
        return repr(value) if value - value == 0 else '{"float":"' + repr(value) + '"}'
    if kind is list:
        return "[" + ",".join(_encode(item, text) for item in value) + "]"
    if kind is tuple:
        return '{"tuple":[' + ",".join(_encode(item, text) for item in value) + "]}"
    if kind is dict:
        pairs = ("[" + _encode(k, text) + "," + _encode(v, text) + "]" for k, v in value.items())
        return '{"dict":[' + ",".join(pairs) + "]}"
    if kind is set or kind is frozenset:
        return '{"' + kind.__name__ + '":[' + ",".join(_encode(item, text) for item in value) + "]}"
    if kind.__module__ == "datetime" and kind.__name__ == "date":
        return '{"date":"' + str(value.isoformat()) + '"}'
    return '{"other":' + text(kind.__qualname__) + "}"


def _decode(document: Any) -> Any:  # noqa: PLR0911 - one return per type tag
    if type(document) is list:
        return [_decode(item) for item in document]
    if type(document) is not dict:
        return document
    ((tag, body),) = document.items()
    if tag == "tuple":
        return tuple(_decode(item) for item in body)
    if tag == "dict":
        return {_decode(key): _decode(value) for key, value in body}
    if tag == "set":
        return {_decode(item) for item in body}
    if tag == "frozenset":
        return frozenset(_decode(item) for item in body)
    if tag == "float":
        return float(body)
    if tag == "date":
        import datetime

        return datetime.date.fromisoformat(body)
    raise ValueError(f"unknown tag {tag}")


def _answer_cases(module: Any, calls_json: str, answers: int) -> None:
    """Call each requested function and write ``{"i": n, "v": value}`` or ``{"i": n, "e": [names]}``."""
    import _json

    class Context:  # what the C scanner needs; no ``re`` import (json.decoder costs ~15 ms)
        strict = True
        object_hook = None
        object_pairs_hook = None
        parse_float = float
        parse_int = int
        parse_constant = float
        memo: dict[str, Any] = {}  # noqa: RUF012 - the scanner's cache

    calls = _json.make_scanner(Context())(calls_json, 0)[0]  # type: ignore[arg-type]
    text, write = _json.encode_basestring_ascii, os.write
    for index, call in enumerate(calls):
        try:
            function = getattr(module, call["call"])
            line = '{"i":' + str(index) + ',"v":' + _encode(function(*_decode(call["args"])), text) + "}\n"
        except BaseException as error:  # the program is untrusted: any failure is an answer, not a crash
            names = [cls.__name__ for cls in type(error).__mro__ if cls.__module__ == "builtins"]
            line = '{"i":' + str(index) + ',"e":[' + ",".join(text(name) for name in names) + "]}\n"
        write(answers, line.encode())


def _run_tests(module: Any, payload: tuple[Any, ...], report: Callable[..., None]) -> None:
    """The in-process hidden-test runner (developer tool; the program shares this interpreter)."""
    tests, names, clean_builtins, run_code, compile_code = payload
    namespace: dict[str, Any] = {"__name__": "hidden_tests", "__builtins__": clean_builtins, "solution": module}
    try:
        run_code(compile_code(SAME_SOURCE, "mtrl-sandbox-same", "exec"), namespace)
        run_code(compile_code(tests, "tests.py", "exec"), namespace)
    except BaseException as error:
        report("tests_error", "", f"{type(error).__name__}: {error}")
        _flush_and_exit(0)
    for name in names:
        try:
            namespace[name]()
        except BaseException as error:
            report("fail", name, f"{type(error).__name__}: {error}")
        else:
            report("pass", name)
    report("done")


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


def main(data: tuple[Any, ...]) -> None:
    cfg, program, mode, payload = data
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    tier = cfg["tier"]
    try:
        import _json  # noqa: F401 - loaded while the standard library is certainly readable (before the uid drop)

        libc = _libc()
        adjust = os.open("/proc/self/oom_score_adj", os.O_WRONLY)  # under memory pressure, sandboxed code dies first
        os.write(adjust, b"1000")
        os.close(adjust)
        if tier == "full":
            _full_tier(cfg)
        else:
            os.chdir(cfg["workdir"])
            libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0 (the reaper too): the same uid cannot open our /proc
            _reaper(libc)
        _limit(cfg)
        _drop(cfg, libc)
        if tier != "full":
            libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: other sandboxes of this uid cannot open our /proc files
            _landlock(cfg)
        # Last: it forbids mount/unshare/setsid, which the tiers above need.
        install_seccomp(_fail_setup, cfg["seccomp"], cfg["seccomp_slots"])
    except Exception as error:
        _fail_setup(f"{type(error).__name__}: {error}")
    answers = cfg["result_fd"]
    marker = cfg.get("marker", "")

    def report(kind: str, name: str = "", detail: object = "") -> None:
        os.write(answers, f"{marker} {kind} {name} {str(detail)[:500]!r}\n".encode("utf-8", "replace"))

    # Taken before the program runs (tests mode): patched builtins or exec/compile do not reach the tests.
    pristine = (dict(vars(builtins)), exec, compile)
    module = type(sys)("solution")  # a plain module object, without importing ``types``
    module.__file__ = "solution.py"
    sys.modules["solution"] = module
    try:
        exec(compile(program, "solution.py", "exec"), module.__dict__)
    except SystemExit as stop:
        if stop.code not in (None, 0):
            _program_failed(mode, report, answers, f"SystemExit({stop.code!r})")
    except BaseException as error:  # the program is untrusted: any failure is a result, not a crash
        _program_failed(mode, report, answers, f"{type(error).__name__}: {error}")
    if mode == "cases":
        _answer_cases(module, payload, answers)
    elif mode == "tests":
        _run_tests(module, (payload[0], payload[1], *pristine), report)
    else:
        report("program_ok")
    _flush_and_exit(0)


def _program_failed(mode: str, report: Callable[..., None], answers: int, detail: str) -> None:
    if mode == "cases":
        import _json

        os.write(answers, ('{"program_failed":' + _json.encode_basestring_ascii(detail[:500]) + "}\n").encode())
    else:
        report("program_failed", "", detail)
    _flush_and_exit(0)


# The bootstrap (runner.BOOTSTRAP) read this code, precompiled, and DATA from stdin, then closed stdin.
main(globals()["DATA"])
