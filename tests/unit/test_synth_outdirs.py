"""The suite's synth outdirs (tests/conftest.py): a session removes the ones killed runs left, and only those."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests import conftest


def test_a_session_removes_the_outdirs_of_dead_processes_only() -> None:
    probe = [sys.executable, "-c", "import os; print(os.getpid())"]
    ended = subprocess.run(probe, capture_output=True, text=True, check=True)
    dead_pid = int(ended.stdout)
    temp = Path(tempfile.gettempdir())
    dead = Path(tempfile.mkdtemp(prefix=f"{conftest._OUTDIR_PREFIX}{dead_pid}-", dir=temp))
    (dead / "asset.abc").mkdir()
    alive = Path(tempfile.mkdtemp(prefix=f"{conftest._OUTDIR_PREFIX}{os.getpid()}-", dir=temp))
    unnamed = Path(tempfile.mkdtemp(prefix=conftest._OUTDIR_PREFIX, dir=temp))  # the old scheme: no owner
    try:
        conftest._remove_outdirs_of_dead_processes()
        assert dead.is_dir()  # too recent to judge (a pid namespace sharing /tmp may hide its owner)
        conftest._remove_outdirs_of_dead_processes(older_than_seconds=-60)
        assert not dead.exists()
        assert alive.is_dir()
        assert unnamed.is_dir()
    finally:
        for path in (dead, alive, unnamed):
            shutil.rmtree(path, ignore_errors=True)
