"""A copy of this checkout as a fresh clone has it (the tracked and new, not ignored, files), with the set-up
environments linked in (`make setup` is what a fresh clone runs first; the tests cannot re-run it)."""

from __future__ import annotations

import shutil
import subprocess
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
    return target
