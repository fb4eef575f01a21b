"""Runs inside the sandbox child. Standard library only; holds nothing the program must not see.

The parent compiles this file once and sends the code object, marshalled with the data, on stdin to a
one-line bootstrap (``python -I -S -B -c runner.BOOTSTRAP``): compiling it per execution would cost ~7 ms.

Phase 1, per tier (``cfg["tier"]``):
- ``full`` (root with CAP_SYS_ADMIN): join the run's memory+pids cgroup; fresh network, mount, IPC, UTS and
  PID namespaces; a new root file system built from an allow-list (interpreter, shared libraries, a few
  device nodes, a fresh /proc) with every site-packages directory and project copy left out, a size-capped
  tmpfs work directory and /tmp; a reaper as PID 1 (when it ends, the kernel kills everything left in the
  namespace); then the program process: its own session, rlimits, a fresh unprivileged uid.
- ``fargate`` (root without CAP_SYS_ADMIN): rlimits, the run's own throwaway uid (RLIMIT_NPROC counts only
  it), Landlock (read-only allow-list, the work directory writable) where the kernel has it.
- ``lambda`` (an unprivileged uid): rlimits, non-dumpable, Landlock where the kernel has it (also scoping
  signals to the sandbox on Landlock ABI 6+).
Always, last: the seccomp filter (no sockets, no signals/resource calls aimed at other processes, no leaving
the process group, no ptrace/process_vm/pidfd/io_uring/namespaces/mounts/keyrings/bpf/perf).

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
    _forward_exit(os.fork())  # the child is PID 1 of the new PID namespace
    _build_root(cfg, libc, ctypes)
    _forward_exit(os.fork())  # PID 1 stays a reaper; the program runs in its child
    os.setsid()  # its own session and group: what the seccomp filter lets it signal


def _forward_exit(child: int) -> None:
    """In the parent: wait for ``child`` (reaping any orphans meanwhile) and exit with its status."""
    if child == 0:
        return
    null = os.open(os.devnull, os.O_WRONLY)
    for descriptor in (1, 2):  # the program's output must reach EOF when the program is done
        os.dup2(null, descriptor)
    os.closerange(3, 256)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(0)
        if pid == child:
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


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
    for path in cfg["expose"]:
        target = root + path
        if os.path.islink(path):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if not os.path.lexists(target):
                os.symlink(os.readlink(path), target)
        elif os.path.isdir(path):
            os.makedirs(target, exist_ok=True)
            bind_readonly(path, target)
        elif os.path.exists(path):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "a").close()
            bind_readonly(path, target)
    for hidden in cfg["hide"]:
        if os.path.isdir(root + hidden):  # every copy of the project and every site-packages: an empty dir
            mount("tmpfs", root + hidden, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=0755")
    os.makedirs(root + "/dev", exist_ok=True)
    for device in DEVICES:
        open(root + "/dev/" + device, "a").close()
        bind_readonly("/dev/" + device, root + "/dev/" + device, MS_NOSUID)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1")):
        os.symlink(target, root + "/dev/" + name)
    os.symlink("/proc/self/fd/2", root + "/dev/stderr")
    os.makedirs(root + "/proc", exist_ok=True)
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)  # this PID namespace only
    uid = cfg["uid"]
    size = f"size={cfg['disk_mb']}m,nr_inodes={cfg['max_files']},mode=0700,uid={uid},gid={uid}"
    for writable in ("/tmp", cfg["workdir"]):  # /tmp first: the work directory usually lives inside it
        os.makedirs(root + writable, exist_ok=True)
        mount("tmpfs", root + writable, "tmpfs", MS_NOSUID | MS_NODEV, size)
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


def _drop(cfg: dict[str, Any]) -> None:
    uid = cfg["uid"]
    if os.getuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)  # from root to another uid: every capability is gone
        if os.getuid() != uid or os.geteuid() != uid or os.getgid() != uid:
            _fail_setup("could not drop privileges")


# Landlock (unprivileged file-system sandboxing, Linux 5.13+): same syscall numbers on x86_64 and aarch64.
LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_READ_FILE_RIGHTS = 1 | 4  # EXECUTE, READ_FILE
LANDLOCK_READ_DIR_RIGHTS = 1 | 4 | 8  # + READ_DIR
# Per ABI version: every file-system right it knows (so none is left unhandled = allowed).
LANDLOCK_FS_RIGHTS = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
LANDLOCK_WRITE_FILE_RIGHTS = 2 | (1 << 14)  # WRITE_FILE, TRUNCATE (ABI 3)


def _landlock(cfg: dict[str, Any]) -> None:
    """Reads only from the allow-list, writes only in the work directory; TCP and signals scoped too."""
    import ctypes

    libc = _libc()
    abi = cfg["landlock_abi"]
    fs_rights = LANDLOCK_FS_RIGHTS[min(abi, 5)]
    attr = (ctypes.c_uint64 * 3)(fs_rights, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)  # TCP bind/connect; scopes
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = libc.syscall(LANDLOCK_CREATE_RULESET, ctypes.byref(attr), size, 0)
    if ruleset < 0:
        _fail_setup("landlock ruleset: " + os.strerror(ctypes.get_errno()))

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    def allow(path: str, directory_rights: int, file_rights: int) -> None:
        try:
            handle = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return
        try:
            rights = directory_rights if os.path.isdir(path) else file_rights
            rule = PathBeneath(rights & fs_rights, handle)
            if libc.syscall(LANDLOCK_ADD_RULE, ruleset, 1, ctypes.byref(rule), 0) != 0:
                _fail_setup(f"landlock rule {path}: " + os.strerror(ctypes.get_errno()))
        finally:
            os.close(handle)

    for path in cfg["readable"]:
        allow(path, LANDLOCK_READ_DIR_RIGHTS, LANDLOCK_READ_FILE_RIGHTS)
    for device in ("/dev/null", "/dev/zero", "/dev/full", "/dev/urandom", "/dev/random"):
        allow(device, 0, LANDLOCK_READ_FILE_RIGHTS | LANDLOCK_WRITE_FILE_RIGHTS)
    allow(cfg["workdir"], fs_rights, fs_rights)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS (required for an unprivileged restrict_self)
        _fail_setup("prctl(NO_NEW_PRIVS): " + os.strerror(ctypes.get_errno()))
    if libc.syscall(LANDLOCK_RESTRICT_SELF, ruleset, 0) != 0:
        _fail_setup("landlock restrict: " + os.strerror(ctypes.get_errno()))
    os.close(ruleset)


# seccomp-BPF (works without privileges, e.g. on Fargate or Lambda where namespaces are unavailable).
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# name: (x86_64, aarch64). Calls that are denied outright (EPERM; socket: EACCES, clone3: ENOSYS).
DENIED = {
    "socket": (41, 198),
    "tkill": (200, 130),
    "setsid": (112, 157),
    "setpgid": (109, 154),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "kcmp": (312, 272),
    "pidfd_open": (434, 434),
    "pidfd_send_signal": (424, 424),
    "pidfd_getfd": (438, 438),
    "process_madvise": (440, 440),
    "process_mrelease": (448, 448),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "unshare": (272, 97),
    "setns": (308, 268),
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "chroot": (161, 51),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "keyctl": (250, 219),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "fanotify_init": (300, 262),
    "name_to_handle_at": (303, 264),
    "open_by_handle_at": (304, 265),
    "clone3": (435, 435),  # its flags are behind a pointer: ENOSYS makes libc fall back to clone()
}
# Calls allowed only when the target (argument ``index``) is the caller itself (0) or its own group leader.
OWN_TARGET = {
    "kill": ((62, 129), 0),
    "rt_sigqueueinfo": ((129, 138), 0),
    "tgkill": ((234, 131), 0),
    "rt_tgsigqueueinfo": ((297, 240), 0),
    "prlimit64": ((302, 261), 0),
    "sched_setaffinity": ((203, 122), 0),
    "sched_setscheduler": ((144, 119), 0),
    "sched_setparam": ((142, 118), 0),
    "sched_setattr": ((314, 274), 0),
    "migrate_pages": ((256, 238), 0),
    "move_pages": ((279, 239), 0),
    "setpriority": ((141, 140), 1),  # (which, who, prio); which == PRIO_USER is denied first
    "ioprio_set": ((251, 30), 1),  # (which, who, ioprio); which == IOPRIO_WHO_USER is denied first
}
USER_WIDE = {"setpriority": 2, "ioprio_set": 3}  # PRIO_USER / IOPRIO_WHO_USER: every process of the uid
CLONE = (56, 220)
NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
_RET_KILL, _RET_ALLOW = 0x80000000, 0x7FFF0000
_EPERM, _EACCES, _ENOSYS = 0x00050000 | 1, 0x00050000 | 13, 0x00050000 | 38
LD, JEQ, JSET, JGE, RET = 0x20, 0x15, 0x45, 0x35, 0x06


def _arg(index: int) -> tuple[int, int, int, int]:
    return (LD, 0, 0, 16 + 8 * index)  # low 32 bits (little endian): what the kernel reads for an int pid


def seccomp_program(machine: str, own_group: int) -> list[tuple[int, int, int, int]]:
    """The BPF filter as (code, jt, jf, k) tuples. Module-level so tests can inspect it."""
    column = 0 if machine == "x86_64" else 1
    program = [
        (LD, 0, 0, 4),  # A = arch
        (JEQ, 1, 0, AUDIT_ARCH[machine]),
        (RET, 0, 0, _RET_KILL),
        (LD, 0, 0, 0),  # A = syscall number
        (JGE, 0, 1, 0x40000000),  # x32 ABI numbers: refuse outright
        (RET, 0, 0, _RET_KILL),
    ]
    allowed_targets = (0, own_group & 0xFFFFFFFF, (-own_group) & 0xFFFFFFFF)
    for name, (numbers, index) in OWN_TARGET.items():
        block: list[tuple[int, int, int, int]] = []
        if name in USER_WIDE:
            block += [_arg(0), (JEQ, len(allowed_targets) + 1, 0, USER_WIDE[name])]  # -> deny
        block.append(_arg(index))
        for position, value in enumerate(allowed_targets):
            block.append((JEQ, len(allowed_targets) - position, 0, value))  # -> allow
        block += [(RET, 0, 0, _EPERM), (RET, 0, 0, _RET_ALLOW)]
        program.append((JEQ, 0, len(block), numbers[column]))
        program += block
    program += [
        (JEQ, 0, 3, CLONE[column]),
        _arg(0),
        (JSET, 0, 1, NAMESPACE_FLAGS),
        (RET, 0, 0, _EPERM),
        (LD, 0, 0, 0),  # A = syscall number again
    ]
    for name, numbers in DENIED.items():
        error = _EACCES if name == "socket" else _ENOSYS if name == "clone3" else _EPERM
        program += [(JEQ, 0, 1, numbers[column]), (RET, 0, 0, error)]
    program.append((RET, 0, 0, _RET_ALLOW))
    return program


def _seccomp() -> None:
    """Install the filter for this process and everything it starts (see ``seccomp_program``)."""
    import ctypes

    libc = _libc()
    machine = os.uname().machine
    if machine not in AUDIT_ARCH:
        _fail_setup(f"seccomp: unsupported architecture {machine}")
    program = seccomp_program(machine, os.getpgrp())

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    filters = (Filter * len(program))(*[Filter(*instruction) for instruction in program])
    fprog = Program(len(program), filters)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        _fail_setup("prctl(NO_NEW_PRIVS): " + os.strerror(ctypes.get_errno()))
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        _fail_setup("seccomp filter: " + os.strerror(ctypes.get_errno()))


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
        if tier == "full":
            _full_tier(cfg)
        else:
            os.chdir(cfg["workdir"])
        _limit(cfg)
        _drop(cfg)
        if tier != "full":
            libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: other sandboxes of this uid cannot open our /proc files
            if cfg["landlock_abi"]:
                _landlock(cfg)
        _seccomp()  # last: it forbids mount/unshare/setsid, which the tiers above need
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
