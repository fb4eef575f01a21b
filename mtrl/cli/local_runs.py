"""Where `mtrl env try` keeps a local run when no --output is given: the user's state directory, never the
working tree (a try started from the repository root used to write runs-local/ inside it)."""

from __future__ import annotations

import os
import time
from pathlib import Path

RUNS_DIR_VARIABLE = "MTRL_RUNS_DIR"


def runs_dir() -> Path:
    """``$MTRL_RUNS_DIR``, else ``$XDG_STATE_HOME/mtrl/runs-local``, else ``~/.local/state/mtrl/runs-local`` (the
    XDG base-directory default for state that outlives a run of the program)."""
    chosen = os.environ.get(RUNS_DIR_VARIABLE)
    if chosen:
        return Path(chosen).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "mtrl" / "runs-local"


def try_output(env_id: str) -> Path:
    """A new folder for one `mtrl env try` of ``env_id``."""
    return runs_dir() / f"{env_id}-try-{time.strftime('%Y%m%d-%H%M%S')}"
