"""A hostile corpus for the ten classes of issue 23, and the check that nothing it tried worked or remained.

Each program attacks as a policy would and prints a JSON report. A key starting ``escape_`` is an attempt that
must fail (an errno or an exception name; ``"ok"`` means it worked); other keys carry what the check weighs
(bytes written, children made, what was found). ``run_corpus`` runs every program through ``run_code`` in one
tier — in the test process, or in a probe process that is the worker as CI runs it (test_hostile_corpus.py) —
and records what each run left behind: zombie children of the worker, live processes of the run's group or
uid, SysV IPC objects, files. ``problems`` lists every way a report or a leftover shows the sandbox failed.
Standard library and ``mtrl.sandbox`` only: probes import this from a copy of the checkout.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mtrl.sandbox import Limits, run_code

PRELUDE = r"""
import ctypes, json, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
x86 = os.uname().machine == "x86_64"
out = {"pgid": os.getpgrp()}
def attempt(name, action):
    try:
        action()
        out[name] = "ok"
    except OSError as error:
        out[name] = error.errno
    except Exception as error:
        out[name] = type(error).__name__
def syscall(x86_number, arm_number, *args):
    value = libc.syscall(x86_number if x86 else arm_number, *args)
    if value < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return value
"""

# §1: the hidden cases must not be readable wherever a copy of the task bank lies.
HIDDEN_CASES = r"""
found = []
for path in @COPIES@:
    try:
        with open(path, "rb") as handle:
            handle.read(16)
        found.append(path)
    except OSError:
        pass
for top in @TOPS@:
    for root, dirs, files in os.walk(top):
        found += [os.path.join(root, name) for name in dirs + files if @TOKEN@ in name]
out["found"] = found
"""

# §2: no socket of any family may send outside the sandbox (a pathname datagram was the hole).
DATAGRAM = r"""
path, abstract = @SOCKET@, b"\0" + @ABSTRACT@.encode()
for family in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK, socket.AF_PACKET):
    attempt(f"escape_socket_{int(family)}", lambda: socket.socket(family, socket.SOCK_DGRAM))
try:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    out["socketpair"] = "ok"
except OSError as error:
    out["socketpair"] = error.errno
    left = None
if left is not None:
    attempt("escape_sendto_path", lambda: left.sendto(b"path", path))
    attempt("escape_sendto_abstract", lambda: left.sendto(b"abstract", abstract))
    attempt("escape_sendmsg_path", lambda: left.sendmsg([b"sendmsg"], [], 0, path))
    attempt("escape_connect_path", lambda: left.connect(path))
    attempt("escape_connect_abstract", lambda: left.connect(abstract))
    attempt("escape_bind", lambda: left.bind(b"\0mtrl-bind-" + @ABSTRACT@.encode()))
    attempt("pair_send", lambda: left.send(b"inside"))  # its own pair still works
    out["pair_received"] = right.recv(16).decode() if out["pair_send"] == "ok" else ""
    addr = ctypes.create_string_buffer(path.encode())
    sockaddr = ctypes.create_string_buffer(b"\x01\x00" + path.encode() + b"\0")  # AF_UNIX, raw sendto
    attempt("escape_raw_sendto", lambda: syscall(44, 206, left.fileno(), addr, 3, 0, sockaddr, len(sockaddr.raw)))
"""

# §3: clone(CLONE_PARENT) made children of the worker, left as its zombies; a fork bomb must stay bounded.
PROCESSES = r"""
import time
made = 0
for _ in range(14):
    try:
        pid = syscall(56, 220, 0x8000 | 17, 0, 0, 0, 0)  # CLONE_PARENT | SIGCHLD
    except OSError as error:
        out["escape_clone_parent"] = error.errno
        break
    if pid == 0:
        os._exit(0)
    made += 1
out["clone_parent_children"] = made
children = 0
for _ in range(200):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    children += 1
out["forked"] = children
"""

# §4 and §5: an unremovable tree, and more bytes and files than the limits allow.
FILES = r"""
written = files = 0
for directory in ("tree/a/b", "/tmp/" + @TOKEN@, "/dev/shm/" + @TOKEN@, "/var/tmp/" + @TOKEN@):
    try:
        os.makedirs(directory)
        out["made_" + directory.split("/")[1]] = "ok"
    except OSError as error:
        out["made_" + directory.split("/")[1]] = error.errno
try:
    for index in range(96):
        with open(f"big-{index}", "wb") as handle:
            handle.write(b"x" * (1024 * 1024))
        written += 1024 * 1024
        files += 1
except OSError as error:
    out["stopped_bytes"] = error.errno
try:
    for index in range(2000):
        open(f"small-{index}", "wb").close()
        files += 1
except OSError as error:
    out["stopped_files"] = error.errno
for path in ("tree/a/b", "tree/a", "tree"):
    try:
        os.chmod(path, 0)
    except OSError:
        pass
out["bytes_written"], out["files_made"] = written, files
"""

# §6: SysV IPC objects and POSIX message queues outlive a process unless something stops them.
IPC = r"""
for index in range(3):
    attempt(f"escape_shmget_{index}", lambda: syscall(29, 194, 0, 16 << 20, 0o1666))  # IPC_PRIVATE|IPC_CREAT
attempt("escape_msgget", lambda: syscall(68, 186, 0, 0o1666))
attempt("escape_semget", lambda: syscall(64, 190, 0, 4, 0o1666))
name = ctypes.create_string_buffer(("/" + @TOKEN@).encode())
attempt("escape_mq_open", lambda: syscall(240, 180, name, 0o100 | 2, 0o666, 0))  # O_CREAT|O_RDWR
"""

# §7: whatever uid the code runs as, it holds no capability in any set, and what they allow fails.
CAPABILITIES = r"""
header = (ctypes.c_uint32 * 2)(0x20080522, 0)
data = (ctypes.c_uint32 * 6)()
syscall(125, 90, header, data)  # capget
for index, name in enumerate(("effective", "permitted", "inheritable")):
    out[name] = data[index] | data[index + 3] << 32
out["bounding"] = [cap for cap in range(64) if libc.prctl(23, cap, 0, 0, 0) == 1]  # PR_CAPBSET_READ
out["ambient"] = [cap for cap in range(64) if libc.prctl(47, 1, cap, 0, 0) == 1]  # PR_CAP_AMBIENT_IS_SET
buffer = ctypes.create_string_buffer(256)
attempt("escape_read_kernel_log", lambda: syscall(103, 116, 3, buffer, 256))  # syslog(READ_ALL)
attempt("escape_setuid_0", lambda: os.setuid(0) if os.getuid() != 0 else os.setuid(12345))
attempt("escape_setgid", lambda: os.setgid(12345))
attempt("escape_chown", lambda: os.chown(".", 12345, 12345))
attempt("escape_mknod", lambda: os.mknod("device", 0o20600, os.makedev(1, 3)))  # /dev/null's numbers
attempt("escape_sethostname", lambda: syscall(170, 161, b"mtrl", 4))
limit = (ctypes.c_uint64 * 2)(1 << 20, 1 << 20)  # above the hard RLIMIT_NOFILE: CAP_SYS_RESOURCE only
attempt("escape_raise_hard_limit", lambda: syscall(302, 261, 0, 7, limit, None))
out["uid"] = os.getuid()
"""

# §8: the worker's launcher and siblings keep credentials in their environment; /tmp and /dev/shm are shared.
NEIGHBOURS = r"""
for label, pid in (("victim", @VICTIM@), ("worker", @WORKER@), ("launcher", @LAUNCHER@)):
    attempt(f"escape_{label}_environ", lambda: open(f"/proc/{pid}/environ", "rb").read())
    attempt(f"escape_{label}_mem", lambda: os.close(os.open(f"/proc/{pid}/mem", os.O_RDONLY)))
attempt("list_tmp", lambda: os.listdir("/tmp"))
"""

CORPUS = {
    "hidden_cases": HIDDEN_CASES,
    "datagram": DATAGRAM,
    "processes": PROCESSES,
    "files": FILES,
    "ipc": IPC,
    "capabilities": CAPABILITIES,
    "neighbours": NEIGHBOURS,
}
SECRET = "mtrl-hostile-secret-" + "3f1c"  # in the victim's environment; must never reach a report


@dataclass
class Context:
    """What the corpus aims at, made by the test (as root): copies, sockets, a same-uid victim."""

    token: str
    copies: list[str]
    tops: list[str]
    socket_path: str
    abstract_name: str
    victim: int
    launcher: int
    workdirs: str  # the sandbox's work directories are made here (tempfile.tempdir), so leftovers show
    worker_had_setpcap: bool = False

    def programs(self, worker: int) -> dict[str, str]:
        values = {
            "@COPIES@": repr(self.copies),
            "@TOPS@": repr(self.tops),
            "@TOKEN@": repr(self.token),
            "@SOCKET@": repr(self.socket_path),
            "@ABSTRACT@": repr(self.abstract_name),
            "@VICTIM@": str(self.victim),
            "@WORKER@": str(worker),
            "@LAUNCHER@": str(self.launcher),
        }
        programs = {}
        for name, body in CORPUS.items():
            text = PRELUDE + body + "print(json.dumps(out))\n"
            for placeholder, value in values.items():
                text = text.replace(placeholder, value)
            programs[name] = text
        return programs


def ipc_objects() -> set[str]:
    """Every SysV IPC object on the machine (one line each), and every POSIX queue when /dev/mqueue exists."""
    found = set()
    for kind in ("shm", "msg", "sem"):
        path = Path("/proc/sysvipc") / kind
        if path.exists():
            found |= {f"{kind} {line.split()[1]}" for line in path.read_text().splitlines()[1:] if line.strip()}
    if os.path.isdir("/dev/mqueue"):
        found |= {f"mq {name}" for name in os.listdir("/dev/mqueue")}
    return found


def _stat(pid: str) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgid, uid) of a process, or None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
        uid = os.stat(f"/proc/{pid}").st_uid
    except (OSError, IndexError):
        return None
    return fields[0].decode(), int(fields[1]), int(fields[2]), uid


def processes() -> dict[int, tuple[str, int, int, int]]:
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = _stat(entry)
            if info is not None:
                found[int(entry)] = info
    return found


def run_corpus(limits: Limits, context: Context) -> dict[str, Any]:
    """Run every program in ``limits``' tier from this process (the worker); report each run and what it left."""
    worker = os.getpid()
    before_ipc = ipc_objects()
    old = {pid for pid, (state, ppid, _, _) in processes().items() if ppid == worker and state == "Z"}
    reports: dict[str, Any] = {}
    for name, program in context.programs(worker).items():
        tempfile.tempdir = context.workdirs  # (the caller restores it)
        result = run_code(program, limits=limits)
        try:
            report = json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            report = {}
        now = processes()
        group = report.get("pgid")
        reports[name] = {
            "status": result.status,
            "detail": result.detail,
            "stderr": result.stderr[-600:],
            "stdout": result.stdout[-2000:],
            "tier": result.tier,
            "isolation": result.isolation,
            "report": report,
            "zombies": sorted(p for p, (s, pp, _, _) in now.items() if pp == worker and s == "Z" and p not in old),
            "left_in_group": sorted(p for p, (s, _, g, _) in now.items() if group and g == group and s not in "ZX"),
            "left_of_uid": sorted(p for p, (s, _, _, u) in now.items() if result.uid is not None and u == result.uid),
        }
    return {
        "runs": reports,
        "new_ipc": sorted(ipc_objects() - before_ipc),
        "workdirs_left": sorted(os.listdir(context.workdirs)),
        "context": asdict(context),
    }


def problems(outcome: dict[str, Any], tier: str, limits: Limits) -> list[str]:  # noqa: PLR0912 - one rule per class
    """Every way the corpus got through or left something behind (empty: the sandbox held)."""
    found: list[str] = []
    context = outcome["context"]
    runs = outcome["runs"]
    for name, run in runs.items():
        if run["tier"] != tier:
            found.append(f"{name}: ran in the {run['tier']} tier, not {tier}")
        if run["status"] != "passed" or not run["report"]:
            found.append(f"{name}: did not run to its report ({run['status']}: {run['detail']} {run['stderr']})")
        worked = [key for key, value in run["report"].items() if key.startswith("escape_") and value == "ok"]
        found += [f"{name}: {key} worked" for key in worked]
        for leftover in ("zombies", "left_in_group", "left_of_uid"):
            if run[leftover]:
                found.append(f"{name}: {leftover} {run[leftover]}")
        if SECRET in run["stdout"] + run["stderr"]:
            found.append(f"{name}: the victim's secret reached the report")
    report = {name: run["report"] for name, run in runs.items()}
    if report["hidden_cases"].get("found"):
        found.append(f"hidden cases readable: {report['hidden_cases']['found']}")
    if report["datagram"].get("pair_received") not in ("inside", None):
        found.append("a socketpair no longer carries data inside the sandbox")
    if report["processes"].get("clone_parent_children"):
        found.append(f"clone(CLONE_PARENT) made {report['processes']['clone_parent_children']} children")
    if report["processes"].get("forked", 0) > limits.max_processes:
        found.append(f"forked {report['processes']['forked']} processes (limit {limits.max_processes})")
    files = report["files"]
    byte_limit, file_limit = (limits.disk_mb * 1024 * 1024, limits.max_files) if tier == "full" else (0, 0)
    if files.get("bytes_written", 0) > byte_limit or files.get("files_made", 0) > file_limit:
        found.append(f"wrote {files.get('bytes_written')} bytes in {files.get('files_made')} files in the {tier} tier")
    if tier != "full":  # only the full tier has a private /tmp (and a tmpfs work directory) to write in
        wrote = [key for key, value in files.items() if key.startswith("made_") and value == "ok"]
        found += [f"files: {key} worked in the {tier} tier" for key in wrote]
        if report["neighbours"].get("list_tmp") == "ok":
            found.append("the shared /tmp is listable")
    caps = report["capabilities"]
    for key in ("effective", "permitted", "inheritable", "ambient"):
        if caps.get(key):
            found.append(f"capabilities left in the {key} set: {caps[key]}")
    if context["worker_had_setpcap"] and caps.get("bounding"):
        found.append(f"capabilities left in the bounding set: {caps['bounding']}")
    if outcome["new_ipc"]:
        found.append(f"IPC objects outlived the run: {outcome['new_ipc']}")
    if outcome["workdirs_left"]:
        found.append(f"work directories left: {outcome['workdirs_left']}")
    for top in ("/tmp", "/dev/shm", "/var/tmp"):
        if os.path.lexists(os.path.join(top, context["token"])):
            found.append(f"{top}/{context['token']} was left behind")
    return found


def listener(path: str, abstract: str) -> tuple[socket.socket, socket.socket]:
    """Datagram sockets any uid may write to: one at ``path`` (mode 0777), one in the abstract namespace."""
    named = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    named.bind(path)
    os.chmod(path, 0o777)
    hidden = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    hidden.bind(b"\0" + abstract.encode())
    for sock in (named, hidden):
        sock.setblocking(False)
    return named, hidden


def received(sockets: tuple[socket.socket, ...]) -> list[bytes]:
    got = []
    for sock in sockets:
        while True:
            try:
                got.append(sock.recv(4096))
            except BlockingIOError:
                break
    return got
