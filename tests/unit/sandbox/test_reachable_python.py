"""The tier tests' own helpers: the mtrl-ci uid is held by one test at a time, across test processes."""

from __future__ import annotations

import subprocess
import sys

from tests.unit.sandbox.reachable_python import CI_USER_LOCK, ci_user_to_itself

TRY_TO_TAKE = "import fcntl, sys; fcntl.flock(open(sys.argv[1], 'a'), fcntl.LOCK_EX | fcntl.LOCK_NB)"


def _another_process_takes_the_uid() -> bool:
    completed = subprocess.run([sys.executable, "-c", TRY_TO_TAKE, str(CI_USER_LOCK)], capture_output=True, check=False)
    return completed.returncode == 0


def test_another_test_process_waits_while_one_test_runs_code_as_mtrl_ci() -> None:
    with ci_user_to_itself():
        assert not _another_process_takes_the_uid()
    assert _another_process_takes_the_uid()
