"""The Landlock ruleset of the fargate and lambda tiers, built once per worker process and shared by every run.

Read (and execute) only the allow-list (``filesystem.py``), write nothing but a few devices; every file-system
right the kernel's ABI knows is handled, so none is left allowed by omission. ABI 4+ also handles TCP bind and
connect (there are no rules for them: refused), ABI 6+ scopes abstract UNIX sockets and signals to the sandbox.
Building the ruleset costs one rule per allowed path (~250): done here once, it is passed to each child as a
descriptor, which restricts itself with it (``landlock_restrict_self``) — a child's domain is a copy, so the
program can neither widen it nor reach this process's ruleset.
"""

from __future__ import annotations

import ctypes
import os
import threading

from mtrl.sandbox.filesystem import FileSystemView

CREATE_RULESET, ADD_RULE, RESTRICT_SELF = 444, 445, 446  # the same numbers on x86_64 and aarch64
READ_FILE_RIGHTS = 1 | 4  # EXECUTE, READ_FILE
READ_DIR_RIGHTS = 1 | 4 | 8  # + READ_DIR
WRITE_FILE_RIGHTS = 2 | (1 << 14)  # WRITE_FILE, TRUNCATE (ABI 3)
# Per ABI version: every file-system right it knows (ABI 6 and 7 added none).
FS_RIGHTS = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/urandom", "/dev/random")


class LandlockError(RuntimeError):
    pass


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_lock = threading.Lock()
_rulesets: dict[tuple[int, FileSystemView], int] = {}


def shared_ruleset(abi: int, view: FileSystemView) -> int:
    """The descriptor of this process's ruleset for ``view`` (made on first use, then kept open)."""
    with _lock:
        descriptor = _rulesets.get((abi, view))
        if descriptor is None:
            descriptor = _rulesets[(abi, view)] = _build(abi, view)
        return descriptor


def _build(abi: int, view: FileSystemView) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    fs_rights = FS_RIGHTS[min(abi, 5)]
    attr = (ctypes.c_uint64 * 3)(fs_rights, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = int(libc.syscall(CREATE_RULESET, ctypes.byref(attr), size, 0))
    if ruleset < 0:
        raise LandlockError("landlock ruleset: " + os.strerror(ctypes.get_errno()))
    rules = [(path, READ_DIR_RIGHTS if is_dir else READ_FILE_RIGHTS) for path, is_dir in view.readable]
    rules += [(device, READ_FILE_RIGHTS | WRITE_FILE_RIGHTS) for device in DEVICES]
    rule = _PathBeneath(0, -1)
    try:
        for path, rights in rules:
            try:
                handle = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # gone since the view was made: nothing to allow
            rule.allowed_access, rule.parent_fd = rights & fs_rights, handle
            failed = libc.syscall(ADD_RULE, ruleset, 1, ctypes.byref(rule), 0) != 0
            os.close(handle)
            if failed:
                raise LandlockError(f"landlock rule {path}: " + os.strerror(ctypes.get_errno()))
    except BaseException:
        os.close(ruleset)
        raise
    return ruleset
