"""An interpreter every uid can reach, for the tier tests (issue 20 item 8).

The fargate tier runs generated code as throwaway uids and the lambda tier is tested as the user ``mtrl-ci``;
both must read the interpreter and its standard library. A pyenv interpreter under ``/root`` (mode 0700) is out
of their reach, so the test suite makes a copy in a world-traversable temporary directory — the binary, its
``libpython`` and the standard library without ``site-packages`` (hard links where the file system allows,
else copies) — and points ``MTRL_SANDBOX_PYTHON`` at it. A binary whose RUNPATH names the old prefix gets
``$ORIGIN/../lib`` written in its place (same length or shorter, padded with NULs), so the copy loads its own
``libpython``. The checkout itself may be private too, so the probes import ``mtrl`` and ``environments`` from
a copy next to it.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import os
import pwd
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mtrl.sandbox.filesystem import SANDBOX_PYTHON_ENV, interpreter, unreachable_by_other_uids, view_of

REPO_ROOT = Path(__file__).resolve().parents[3]
CI_USER = "mtrl-ci"  # the unprivileged user the lambda tier is tested as (.ci/run creates it)
SKIPPED_STDLIB = {"site-packages", "dist-packages", "test", "idlelib", "turtledemo", "ensurepip", "__phello__"}
HOW_TO = (
    "the tier tests run code as other uids, which need an interpreter they can reach: run them with a Python "
    f"installed outside any private home directory (e.g. /usr/local), or set {SANDBOX_PYTHON_ENV} to one"
)


def ci_user_exists() -> bool:
    try:
        pwd.getpwnam(CI_USER)
    except KeyError:
        return False
    return True


# Skipped without the user, saying how to create it; in CI (CI set) its absence fails the test instead.
_skip_without_ci_user = pytest.mark.skipif(
    not ci_user_exists() and not os.environ.get("CI"),
    reason=f"needs the unprivileged user {CI_USER}: create it with `useradd --system --no-create-home --shell "
    f"/usr/sbin/nologin {CI_USER}` (as .ci/run does; in CI its absence fails the test)",
)
# RLIMIT_NPROC counts every process of a uid, and the lambda tier sets it on top of the uid's count at the start of a
# run: mtrl-ci processes of another test process ending mid-run would hand this run's code their slots (seen: a
# hostile program forking 11 under a limit of 8 while the other pytest worker's mtrl-ci probe wound down). So the
# tests that run code as mtrl-ci hold the uid one at a time, across test processes, as one worker holds its own.
CI_USER_LOCK = Path(tempfile.gettempdir()) / f"{CI_USER}-uid.lock"


@contextlib.contextmanager
def ci_user_to_itself() -> Iterator[None]:
    with CI_USER_LOCK.open("a") as handle:  # closing it releases the lock
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def needs_ci_user(test: Callable[..., None]) -> Callable[..., None]:
    """A test that runs code as mtrl-ci: skipped (or failed in CI) without the user, and the uid's only user."""

    @functools.wraps(test)
    def alone(*args: Any, **kwargs: Any) -> None:
        with ci_user_to_itself():
            test(*args, **kwargs)

    return _skip_without_ci_user(alone)


class CopyError(RuntimeError):
    pass


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _copy_tree(source: Path, target: Path, skip: set[str]) -> None:
    for root, dirs, files in os.walk(source):
        relative = Path(root).relative_to(source)
        dirs[:] = [d for d in dirs if not (relative == Path(".") and d in skip) and not d.startswith("config-")]
        (target / relative).mkdir(mode=0o755, exist_ok=True)
        for name in files:
            path = Path(root) / name
            if path.is_symlink():
                (target / relative / name).symlink_to(os.readlink(path))
            else:
                _link_or_copy(path, target / relative / name)


def _runpath(binary: bytes) -> tuple[int, bytes] | None:
    """(file offset, value) of the DT_RUNPATH (or DT_RPATH) string of a 64-bit little-endian ELF, or None."""
    if binary[:6] != b"\x7fELF\x02\x01":
        return None
    (phoff,) = struct.unpack_from("<Q", binary, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", binary, 0x36)
    loads, dynamic = [], None
    for index in range(phnum):
        kind, _, offset, vaddr, _, size, _, _ = struct.unpack_from("<IIQQQQQQ", binary, phoff + index * phentsize)
        if kind == 1:
            loads.append((vaddr, offset, size))
        elif kind == 2:
            dynamic = (offset, size)
    if dynamic is None:
        return None
    tags: dict[int, int] = {}
    for position in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, value = struct.unpack_from("<qQ", binary, position)
        if tag == 0:
            break
        tags.setdefault(tag, value)
    string = tags.get(29, tags.get(15))  # DT_RUNPATH, else DT_RPATH
    if string is None or 5 not in tags:
        return None
    table = next((tags[5] - vaddr + offset for vaddr, offset, size in loads if vaddr <= tags[5] < vaddr + size), None)
    if table is None:
        return None
    start = table + string
    return start, binary[start : binary.index(b"\0", start)]


def _relocate(binary_path: Path, old_prefix: str) -> None:
    """Point an absolute RUNPATH inside ``old_prefix`` at the copy ($ORIGIN-relative)."""
    binary = bytearray(binary_path.read_bytes())
    found = _runpath(bytes(binary))
    if found is None:
        return
    start, value = found
    entries = value.decode().split(":")
    moved = [
        "$ORIGIN/" + os.path.relpath(entry, os.path.join(old_prefix, "bin")) if entry.startswith(old_prefix) else entry
        for entry in entries
    ]
    new = ":".join(moved).encode()
    if new == value:
        return
    if len(new) > len(value):
        raise CopyError(f"cannot relocate the RUNPATH {value.decode()!r} of {binary_path} in place")
    binary[start : start + len(value)] = new + b"\0" * (len(value) - len(new))
    binary_path.write_bytes(bytes(binary))


def build_copy(destination: Path) -> str:
    """Copy this process's sandbox interpreter under ``destination``; the copy's binary."""
    executable = interpreter()
    prefix = os.path.realpath(sys.base_prefix)
    stdlib = os.path.realpath(os.path.dirname(os.__file__))
    if not executable.startswith(prefix + "/") or not stdlib.startswith(prefix + "/"):
        raise CopyError(f"{executable} and its standard library {stdlib} are not both under {prefix}")
    binary = destination / os.path.relpath(executable, prefix)
    binary.parent.mkdir(mode=0o755, parents=True)
    shutil.copy2(executable, binary)  # a real copy: its RUNPATH may be rewritten
    _relocate(binary, prefix)
    library_dir = Path(prefix, "lib")
    (destination / "lib").mkdir(mode=0o755, exist_ok=True)
    for library in library_dir.glob("libpython*.so*"):
        target = destination / "lib" / library.name
        if library.is_symlink():
            target.symlink_to(os.readlink(library))
        else:
            _link_or_copy(library, target)
    _copy_tree(Path(stdlib), destination / os.path.relpath(stdlib, prefix), SKIPPED_STDLIB)
    return str(binary)


def copy_project(destination: Path) -> Path:
    """``mtrl``, ``environments`` and the hostile programs of this checkout (no caches) under ``destination``."""
    for package in ("mtrl", "environments"):
        shutil.copytree(REPO_ROOT / package, destination / package, ignore=shutil.ignore_patterns("__pycache__"))
    corpus = destination / "tests" / "unit" / "sandbox"
    corpus.mkdir(parents=True)
    for name in ("hostile.py", "grpo_group.py"):
        shutil.copy(REPO_ROOT / "tests" / "unit" / "sandbox" / name, corpus / name)
    for path in destination.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return destination


class ReachablePython:
    """Built at most once per process; ``ensure()`` returns "" when ready, else why the tests must skip."""

    def __init__(self) -> None:
        self.directory: str | None = None
        self.executable = ""
        self.project = REPO_ROOT
        self.problem: str | None = None

    def ensure(self) -> str:
        if self.problem is None:
            self.problem = self._build()
        return self.problem

    def _build(self) -> str:
        try:
            own = interpreter()
            directory = tempfile.mkdtemp(prefix="mtrl-sandbox-python-")
            self.directory = directory
            atexit.register(self.remove)  # also when a test worker process ends without unconfiguring
            os.chmod(directory, 0o755)
            root = Path(directory)
            if unreachable_by_other_uids(view_of(own)):
                self.executable = build_copy(root / "python")
                if unreachable_by_other_uids(view_of(self.executable)):
                    return f"{HOW_TO} (the copy under {directory} is not reachable either: check TMPDIR)"
                os.environ[SANDBOX_PYTHON_ENV] = self.executable
            else:
                self.executable = own
            self.project = copy_project(root / "project")
            stat_result = os.stat(directory)
            if not stat_result.st_mode & stat.S_IXOTH:
                return f"{HOW_TO} ({directory} is not world-traversable)"
        except (OSError, CopyError, subprocess.SubprocessError, RuntimeError) as error:
            return f"{HOW_TO} (a reachable copy could not be made: {error})"
        return ""

    def remove(self) -> None:
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


REACHABLE = ReachablePython()
