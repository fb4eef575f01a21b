"""What this machine lets the sandbox use: the tier, Landlock, cgroups, the uid pool; and cleaning up after a run."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import secrets
import shutil
import signal
import stat
import threading
import time
from pathlib import Path
from typing import Literal

from mtrl.sandbox.filesystem import inside

Tier = Literal["full", "fargate", "lambda"]
UID_RANGE = (200_000, 1_200_000)  # far above any real account; one fresh uid per concurrent execution
CAP_SETGID, CAP_SETUID, CAP_SYS_ADMIN = 6, 7, 21


def effective_capabilities() -> int:
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def detect_tier() -> Tier:
    """full with root and CAP_SYS_ADMIN; fargate with root that can switch uids; lambda otherwise."""
    if os.geteuid() != 0:
        return "lambda"
    caps = effective_capabilities()
    if caps >> CAP_SYS_ADMIN & 1:
        return "full"
    if caps >> CAP_SETUID & 1 and caps >> CAP_SETGID & 1:
        return "fargate"
    return "lambda"


@functools.cache
def landlock_abi() -> int:
    """The kernel's Landlock ABI version, or 0 when Landlock is absent or disabled."""
    libc = ctypes.CDLL(None, use_errno=True)
    version = libc.syscall(444, None, 0, 1)  # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    return max(0, int(version))


@functools.cache
def protect_worker() -> None:
    """PR_SET_DUMPABLE 0: processes of the same uid can no longer read our /proc files or memory, or ptrace us."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(4, 0, 0, 0, 0)


class UidPool:
    """Throwaway uids, one per concurrent execution of this process; every process of a uid dies on release."""

    def __init__(self, first: int = UID_RANGE[0], last: int = UID_RANGE[1]) -> None:
        self._range = (first, last)
        self._in_use: set[int] = set()
        self._lock = threading.Lock()

    def acquire(self) -> int:
        with self._lock:
            while True:
                uid = self._range[0] + secrets.randbelow(self._range[1] - self._range[0])
                if uid not in self._in_use:
                    self._in_use.add(uid)
                    return uid

    def release(self, uid: int) -> None:
        kill_uid(uid)
        with self._lock:
            self._in_use.discard(uid)


UIDS = UidPool()


def tasks_of_uid(uid: int) -> int:
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


def kill_uid(uid: int) -> None:
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


def remove_tree(path: str) -> bool:
    """Delete ``path`` even when the code made parts of it unreadable (a tree chmod'ed to 0); True when gone.

    The owner (or root) may always chmod: every directory is opened up to 0700 before it is listed.
    """
    pending = [path]
    while pending:
        directory = pending.pop()
        try:
            if stat.S_ISLNK(os.lstat(directory).st_mode):
                continue
            os.chmod(directory, 0o700)
            with os.scandir(directory) as entries:
                pending += [entry.path for entry in entries if entry.is_dir(follow_symlinks=False)]
        except OSError:
            continue
    shutil.rmtree(path, ignore_errors=True)
    return not os.path.lexists(path)


class RunCgroup:
    """A memory+pids cgroup for one execution (cgroup v2, or the v1 memory and pids hierarchies)."""

    def __init__(self, directories: list[str]) -> None:
        self.directories = directories

    @classmethod
    def create(cls, memory_bytes: int, max_processes: int) -> RunCgroup | None:
        """None when this machine gives us no writable memory and pids controllers."""
        parents = _cgroup_parents()
        if parents is None:
            return None
        name = "mtrl-sandbox-" + secrets.token_hex(6)
        made: list[str] = []
        try:
            if "v2" in parents:
                directory = os.path.join(parents["v2"], name)
                os.mkdir(directory)
                made.append(directory)
                _write(directory, "memory.max", memory_bytes)
                _write(directory, "memory.swap.max", 0, optional=True)
                _write(directory, "pids.max", max_processes)
            else:
                for controller in ("memory", "pids"):
                    directory = os.path.join(parents[controller], name)
                    os.mkdir(directory)
                    made.append(directory)
                _write(made[0], "memory.limit_in_bytes", memory_bytes)
                _write(made[0], "memory.memsw.limit_in_bytes", memory_bytes, optional=True)
                _write(made[1], "pids.max", max_processes)
        except OSError:
            cls(made).remove()
            return None
        return cls(made)

    def remove(self) -> None:
        for directory in self.directories:
            for _ in range(200):
                with contextlib.suppress(OSError):
                    if os.path.exists(os.path.join(directory, "cgroup.kill")):
                        _write(directory, "cgroup.kill", 1)
                    with open(os.path.join(directory, "cgroup.procs"), encoding="ascii") as handle:
                        for pid in handle.read().split():
                            with contextlib.suppress(ProcessLookupError):
                                os.kill(int(pid), signal.SIGKILL)
                try:
                    os.rmdir(directory)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.005)  # the killed processes are still exiting


def _write(directory: str, name: str, value: int, *, optional: bool = False) -> None:
    try:
        with open(os.path.join(directory, name), "w", encoding="ascii") as handle:
            handle.write(str(value))
    except OSError:
        if not optional:
            raise


@functools.cache
def _cgroup_parents() -> dict[str, str] | None:
    """Where this process may create child cgroups: {"v2": dir} or {"memory": dir, "pids": dir}."""
    try:
        own = Path("/proc/self/cgroup").read_text(encoding="ascii").splitlines()
        mounts = Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    paths: dict[str, str] = {}
    for line in own:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else ["v2"]:
            paths[controller] = path
    points: dict[str, tuple[str, str]] = {}  # controller -> (mount point, the mount's root in the hierarchy)
    for line in mounts:
        fields = line.split()
        separator = fields.index("-")
        fstype, options = fields[separator + 1], fields[separator + 3].split(",")
        if fstype == "cgroup2":
            points.setdefault("v2", (fields[4], fields[3]))
        elif fstype == "cgroup":
            for controller in ("memory", "pids"):
                if controller in options:
                    points.setdefault(controller, (fields[4], fields[3]))

    def located(controller: str) -> str:
        point, root = points[controller]
        path = paths[controller]
        relative = path[len(root) :] if root != "/" and inside(path, root) else path
        return point + relative.rstrip("/")

    if "v2" in points and "v2" in paths:
        directory = located("v2")
        with contextlib.suppress(OSError):
            enabled = Path(directory, "cgroup.subtree_control").read_text(encoding="ascii").split()
            if {"memory", "pids"} <= set(enabled) and os.access(directory, os.W_OK):
                return {"v2": directory}
    if all(controller in points and controller in paths for controller in ("memory", "pids")):
        found = {controller: located(controller) for controller in ("memory", "pids")}
        if all(os.access(directory, os.W_OK) for directory in found.values()):
            return found
    return None
