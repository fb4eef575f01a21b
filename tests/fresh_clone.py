"""A copy of this checkout as a fresh clone has it (the tracked and new, not ignored, files), with the set-up
environments linked in (`make setup` is what a fresh clone runs first; the tests cannot re-run it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# What `make setup` / `make emulator` create in a clone: linked, never copied or re-installed.
SET_UP = (".venv", ".venv-emulator", "node_modules", ".build")


def fresh_clone(target: Path) -> Path:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for relative in filter(None, listed.split("\0")):
        source = REPO / relative
        if not source.is_file():  # deleted in the work tree but not yet in the index
            continue
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)
    for name in SET_UP:
        if (REPO / name).exists():
            (target / name).symlink_to((REPO / name).resolve())
            _share_bytecode(target / name, (REPO / name).resolve())
    return target


def _share_bytecode(link: Path, real: Path) -> None:
    """The bytecode cache (``PYTHONPYCACHEPREFIX``) of a linked set-up directory is the real directory's.

    The cache is keyed by a source's path, and an interpreter in the clone's ``.venv`` reaches its packages through
    the link (a venv's ``sys.prefix`` is the path it was started by), so without this every fresh clone compiled
    aws-cdk-lib and the rest of its imports again (~50 MB of bytecode, ~15 CPU-s for the demo's synth). The files
    behind both paths are the same files, so the cached bytecode (checked against their size and time) is theirs."""
    prefix = os.environ.get("PYTHONPYCACHEPREFIX") or sys.pycache_prefix
    if not prefix or not real.is_dir():
        return
    cache = Path(prefix).resolve()
    cached_real = cache / real.relative_to("/")
    cached_real.mkdir(parents=True, exist_ok=True)
    for parent in {link.parent.absolute(), link.parent.resolve()}:  # the clone's path as given, and as resolved
        cached_link = cache / parent.relative_to("/") / link.name
        cached_link.parent.mkdir(parents=True, exist_ok=True)
        if not cached_link.exists():
            cached_link.symlink_to(cached_real, target_is_directory=True)
