"""What sandboxed code may read: exactly what its interpreter needs, found by asking that interpreter.

The allow-list is not "``/usr`` and more": a copy of a task bank under ``/usr/local/share``, a pip-installed
environment in ``site-packages`` or a data file next to the shared libraries must stay out of reach. So the
sandbox interpreter is run once per worker process (trusted code, no program) to import every extension
module of its standard library; what it then has mapped — itself, its shared libraries, the loader, the
locale data — plus the standard library directory (every ``site-packages``/``dist-packages`` and every copy
of the project inside it left out), ``/etc/ld.so.cache``, ``/etc/localtime`` and the time-zone database is
the whole readable tree. The full tier builds its new root from it (``links``: the symlinks the loader and
the interpreter resolve on the way); Landlock allows reading exactly it (``readable``).

``MTRL_SANDBOX_PYTHON`` names the interpreter the sandbox runs (default: this process's own interpreter). It
must be the same Python version (the harness is sent as bytecode). The test suite points it at a copy every
uid can reach when this process's interpreter lives in a private home directory (tests/unit/sandbox).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import stat
import struct
import subprocess
import sys
from collections import deque
from dataclasses import dataclass
from importlib.util import MAGIC_NUMBER
from pathlib import Path

SANDBOX_PYTHON_ENV = "MTRL_SANDBOX_PYTHON"
# Top-level names that are symlinks on merged-/usr systems (/lib -> usr/lib): the loader's paths go through them.
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime")
SYSTEM_DIRECTORIES = ("/usr/share/zoneinfo",)
SOURCE_DIRS = ("/usr/src", "/usr/local/src")
PROJECT_PACKAGES = ("mtrl", "environments", "custom-environments", "custom_environments")
# Run by the sandbox interpreter (trusted: no program involved), without any capability like everything the
# sandbox starts. It loads every extension module of its standard library, so /proc/self/maps then lists every
# shared library any standard-library import can need.
LAYOUT_PROBE = r"""
import ctypes, importlib, importlib.util, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
capability = 0
while libc.prctl(24, capability, 0, 0, 0) == 0:  # PR_CAPBSET_DROP (stops at once without CAP_SETPCAP)
    capability += 1
libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
libc.capset((ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)())  # no capability left in any set
libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
stdlib = os.path.dirname(os.__file__)
dynload = os.path.join(stdlib, "lib-dynload")
for name in sorted(os.listdir(dynload)) if os.path.isdir(dynload) else []:
    if name.endswith(".so"):
        try:
            importlib.import_module(name.split(".", 1)[0])
        except BaseException:
            pass
mapped = set()
with open("/proc/self/maps") as handle:
    for line in handle:
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].startswith("/"):
            mapped.add(fields[5].rstrip("\n"))
with open("/proc/self/status") as handle:
    capabilities = {k: int(v, 16) for k, _, v in (line.partition(":") for line in handle) if k.startswith("Cap")}
print(json.dumps({"magic": importlib.util.MAGIC_NUMBER.hex(), "stdlib": stdlib, "mapped": sorted(mapped),
                  "version": sys.version.split()[0], "capabilities": capabilities}))
"""


class InterpreterError(RuntimeError):
    """The sandbox interpreter cannot be used (the message says why and what to do)."""


def interpreter() -> str:
    """The real interpreter binary the sandbox runs (``MTRL_SANDBOX_PYTHON``, else this process's base one)."""
    override = os.environ.get(SANDBOX_PYTHON_ENV)
    return os.path.realpath(override or getattr(sys, "_base_executable", None) or sys.executable)


def project_roots() -> list[str]:
    """The running checkout (task banks, hidden tests, reference solutions) and MTRL_PROJECT_ROOT."""
    roots = {str(Path(__file__).resolve().parents[2])}
    override = os.environ.get("MTRL_PROJECT_ROOT")
    if override:
        roots.add(str(Path(override).resolve()))
    return sorted(roots)


def inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


@dataclass(frozen=True)
class Layout:
    stdlib: str
    mapped: tuple[str, ...]
    capabilities: tuple[tuple[str, int], ...] = ()  # what the probe held while it ran (none: it drops them)


@functools.cache
def interpreter_layout(executable: str) -> Layout:
    """Where ``executable`` keeps its standard library and what it maps once every extension module is loaded."""
    try:
        completed = subprocess.run(
            [executable, "-I", "-S", "-B", "-c", LAYOUT_PROBE],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={"LANG": "C.UTF-8", "PATH": "/usr/bin:/bin"},  # the locale the sandbox runs with
            cwd="/",
        )
        document = json.loads(completed.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as error:
        raise InterpreterError(f"the sandbox interpreter {executable} does not run ({error})") from None
    if document["magic"] != MAGIC_NUMBER.hex():
        raise InterpreterError(
            f"the sandbox interpreter {executable} is Python {document['version']}, this process is "
            f"{sys.version.split()[0]}: {SANDBOX_PYTHON_ENV} must name the same Python version"
        )
    mapped = tuple(path for path in document["mapped"] if os.path.isfile(path))
    capabilities = tuple(sorted(document.get("capabilities", {}).items()))
    return Layout(os.path.realpath(document["stdlib"]), mapped, capabilities)


@dataclass(frozen=True)
class FileSystemView:
    directories: tuple[str, ...]  # readable beneath (minus ``hide``); bound read-only whole in the full tier
    files: tuple[str, ...]  # single readable files
    links: tuple[tuple[str, str], ...]  # (symlink, its target) the loader and interpreter resolve; full tier
    hide: tuple[str, ...]  # inside ``directories``: empty in the full tier, left out of ``readable``
    readable: tuple[tuple[str, bool], ...]  # Landlock: (path, is a directory)
    skeleton: tuple[str, ...] = ()  # full tier: the directories its new root needs, parents first (not /tmp)


def filesystem_view() -> FileSystemView:
    return view_of(interpreter())


@functools.cache
def view_of(executable: str) -> FileSystemView:
    """The allow-list of ``executable`` (see the module docstring)."""
    layout = interpreter_layout(executable)
    directories = [layout.stdlib, *(os.path.realpath(d) for d in SYSTEM_DIRECTORIES if os.path.isdir(d))]
    files: set[str] = set()
    for path in [executable, *layout.mapped, *SYSTEM_FILES]:
        if not os.path.exists(path):
            continue
        real = os.path.realpath(path)
        if os.path.basename(real).startswith("LC_"):  # locale data: the whole locale (its other categories)
            directories.append(os.path.dirname(real))
        else:
            files.add(real)
    directories = _outermost(directories)
    files = {path for path in files if not any(inside(path, directory) for directory in directories)}
    hide = _hidden(layout.stdlib, directories)
    readable: list[tuple[str, bool]] = []
    for directory in directories:
        readable += _expand(directory, hide)
    readable += [(path, False) for path in sorted(files)]
    links = _links(executable, sorted(files), directories)
    skeleton = _skeleton([*directories, *(os.path.dirname(p) for p in [*files, *(link for link, _ in links)])])
    return FileSystemView(
        tuple(directories), tuple(sorted(files)), links, tuple(hide), tuple(readable), tuple(skeleton)
    )


def _skeleton(needed: list[str]) -> list[str]:
    """Every directory on the way to ``needed`` (and the /dev and /proc mount points), parents first."""
    found = {"/dev", "/proc"}
    for path in needed:
        ancestor = path
        while ancestor not in ("/", ""):
            found.add(ancestor)
            ancestor = os.path.dirname(ancestor)
    found.discard("/tmp")  # noqa: S108 - the run's own tmpfs, mounted before anything goes in it
    return sorted(found, key=lambda path: (path.count("/"), path))


def _outermost(directories: list[str]) -> list[str]:
    unique = sorted(set(directories))
    return [d for d in unique if not any(other != d and inside(d, other) for other in unique)]


def _hidden(stdlib: str, directories: list[str]) -> list[str]:
    """Inside the readable directories: every site-packages and anything holding a copy of the project.

    The standard library's site-packages and dist-packages are hidden whether or not they exist yet (one
    made later, by a pip install, stays out of reach too).
    """
    always = {os.path.join(stdlib, name) for name in ("site-packages", "dist-packages")}
    # Import paths of this process (a venv, the checkout) and the project's roots, where they fall inside.
    found = {os.path.realpath(entry or ".") for entry in [*sys.path, *project_roots(), *SOURCE_DIRS]}
    for directory in directories:  # a copy of a project package at the top of one (e.g. <stdlib>/mtrl)
        found.update(os.path.join(directory, name) for name in PROJECT_PACKAGES)
    dynload = os.path.join(stdlib, "lib-dynload")
    found = {
        path
        for path in found
        if os.path.lexists(path)
        and not inside(stdlib, path)  # never the standard library itself or a directory holding it
        and not inside(path, dynload)
        and any(inside(path, directory) for directory in directories)
    }
    return sorted(always | found)


def _expand(root: str, hide: list[str]) -> list[tuple[str, bool]]:
    """``root`` itself, or its children minus the hidden ones when something inside it is hidden."""
    if any(inside(root, hidden) for hidden in hide):
        return []
    if not any(inside(hidden, root) for hidden in hide):
        return [(root, os.path.isdir(root))]
    out: list[tuple[str, bool]] = []
    with contextlib.suppress(OSError):
        for entry in sorted(os.listdir(root)):
            out += _expand(os.path.join(root, entry), hide)
    return out


def _links(executable: str, files: list[str], directories: list[str]) -> tuple[tuple[str, str], ...]:
    """Every symlink on the way to the files: top-level ones, the ELF interpreter's, and each file's aliases."""
    links: dict[str, str] = {}
    for path in SYSTEM_LINKS:
        if os.path.islink(path):
            links[path] = os.readlink(path)
    for path in [elf_interpreter(executable), *SYSTEM_FILES]:
        if path:
            links.update(symlinks_on_the_way(path))
    wanted = set(files)
    for folder in sorted({os.path.dirname(path) for path in files}):
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            for entry in entries:  # soname aliases (libffi.so.8 -> libffi.so.8.1.2) the loader opens by name
                if entry.is_symlink() and os.path.realpath(entry.path) in wanted:
                    links.update(symlinks_on_the_way(entry.path))
    return tuple(sorted((p, t) for p, t in links.items() if not any(inside(p, d) for d in directories)))


def symlinks_on_the_way(path: str, limit: int = 40) -> dict[str, str]:
    """The symlinks resolving ``path`` goes through, each named by its real parent directory, with its target."""
    found: dict[str, str] = {}
    parts = deque(part for part in path.split("/") if part)
    resolved = "/"
    while parts and len(found) < limit:
        part = parts.popleft()
        if part == ".":
            continue
        if part == "..":
            resolved = os.path.dirname(resolved)
            continue
        candidate = os.path.join(resolved, part)
        if os.path.islink(candidate):
            target = os.readlink(candidate)
            found[candidate] = target
            resolved = "/" if target.startswith("/") else resolved
            parts.extendleft(reversed([p for p in target.split("/") if p]))
        else:
            resolved = candidate
    return found


def elf_interpreter(executable: str) -> str:
    """The program interpreter (PT_INTERP, e.g. /lib64/ld-linux-x86-64.so.2) of a 64-bit ELF file, or ""."""
    try:
        with open(executable, "rb") as handle:
            head = handle.read(64)
            if head[:5] != b"\x7fELF\x02" or head[5] != 1:  # 64-bit, little-endian
                return ""
            (phoff,) = struct.unpack_from("<Q", head, 0x20)
            phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
            handle.seek(phoff)
            table = handle.read(phentsize * phnum)
            for index in range(phnum):
                kind, _, offset, _, _, size = struct.unpack_from("<IIQQQQ", table, index * phentsize)
                if kind == 3:  # PT_INTERP
                    handle.seek(offset)
                    return handle.read(size).rstrip(b"\0").decode()
    except (OSError, struct.error, UnicodeDecodeError):
        return ""
    return ""


@functools.cache
def unreachable_by_other_uids(view: FileSystemView) -> str:
    """The first allow-listed path another uid cannot reach (a directory on its way not world-traversable), or ""."""
    for path, needs in [*((d, stat.S_IROTH | stat.S_IXOTH) for d in view.directories),
                        *((f, stat.S_IROTH) for f in view.files)]:  # fmt: skip
        parent = os.path.dirname(path)
        while parent != "/":
            with contextlib.suppress(OSError):
                if not os.stat(parent).st_mode & stat.S_IXOTH:
                    return path
            parent = os.path.dirname(parent)
        with contextlib.suppress(OSError):
            if os.stat(path).st_mode & needs != needs:
                return path
    return ""
