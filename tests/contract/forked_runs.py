"""Several ``python -m …`` / ``python -c …`` runs of one venv's interpreter for the price of one start-up.

A test that runs a venv's entry point several times (``.venv-verl``: every start imports torch and verl, about 12 CPU
seconds) hands the runs to :func:`run_forked`: one interpreter of that venv imports the heavy modules once, then
forks one child per run. Each child is a copy of the parent as it stood after the imports and nothing else (no run
ever executes in the parent, so nothing one run does reaches the next): it gets the run's own environment, working
directory and ``sys.argv``, executes the module or code as ``__main__`` the way the interpreter does, and exits with
the run's exit code, its stdout and stderr captured to files. The results come back as
``subprocess.CompletedProcess`` objects, one per run, in order.

What the interpreter reads only at start-up (``PYTHONPATH``, ``-X``/``-W`` options, ``sitecustomize``) is the
parent's, so it is the same for every run; a run's ``env`` may only add to or change variables read later.
This file is also the parent's script (``python forked_runs.py <request.json> <results.json>``): stdlib only.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Run:
    """One interpreter run: ``args`` as after ``python`` (``("-m", module, …)`` or ``("-c", code, …)``)."""

    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)  # added to the parent's environment
    cwd: str | None = None  # default: the parent's


def run_forked(
    python: Path,
    runs: Sequence[Run],
    *,
    preload: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
    timeout: float = 900,
) -> list[subprocess.CompletedProcess[str]]:
    """Start ``python`` once with ``env`` in ``cwd``, import ``preload``, then run each of ``runs`` in a fork."""
    with tempfile.TemporaryDirectory(prefix="forked-runs-") as directory:
        request, results = Path(directory) / "request.json", Path(directory) / "results.json"
        request.write_text(
            json.dumps(
                {
                    "preload": list(preload),
                    "runs": [{"args": list(r.args), "env": dict(r.env), "cwd": r.cwd} for r in runs],
                }
            )
        )
        parent = subprocess.run(
            [str(python), __file__, str(request), str(results)],
            cwd=cwd,
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if parent.returncode != 0 or not results.exists():
            raise RuntimeError(f"the forking parent failed ({parent.returncode}):\n{parent.stderr[-4000:]}")
        return [
            subprocess.CompletedProcess([str(python), *run.args], item["returncode"], item["stdout"], item["stderr"])
            for run, item in zip(runs, json.loads(results.read_text()), strict=True)
        ]


def _exit_code(error: SystemExit) -> int:
    """What the interpreter exits with for ``SystemExit(code)``."""
    if error.code is None:
        return 0
    if isinstance(error.code, int):
        return error.code
    print(error.code, file=sys.stderr)
    return 1


def _child(run: Mapping[str, Any], stdout: Path, stderr: Path) -> None:
    """In the forked child: become the run, then exit with its code (never returns)."""
    code = 1
    try:
        for fd, path in ((1, stdout), (2, stderr)):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(target, fd)
            os.close(target)
        os.environ.update(run["env"])
        if run["cwd"]:
            os.chdir(run["cwd"])
        flag, target_name, *rest = run["args"]
        try:
            if flag == "-m":
                # What `python -m` puts first on the path (the working directory), and argv[0] is set by runpy.
                sys.path[0] = os.getcwd()
                sys.argv = [target_name, *rest]
                runpy.run_module(target_name, run_name="__main__", alter_sys=True)
            elif flag == "-c":
                sys.path[0] = ""
                sys.argv = ["-c", *rest]
                exec(compile(target_name, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
            else:
                raise ValueError(f"only -m and -c runs are supported, not {flag!r}")
            code = 0
        except SystemExit as error:
            code = _exit_code(error)
        except BaseException:
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()  # what the interpreter runs at exit (os._exit below skips it)
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed stream has nothing left to write
                stream.flush()
        os._exit(code)


def _serve(request_path: Path, results_path: Path) -> None:
    request = json.loads(request_path.read_text())
    sys.path[0] = os.getcwd()  # not this file's folder: the path every run starts from
    for module in request["preload"]:
        importlib.import_module(module)
    sys.stdout.flush()
    sys.stderr.flush()
    results = []
    # Not a TemporaryDirectory: its finalizer would run in the children's exit functions and remove it.
    directory = tempfile.mkdtemp(prefix="forked-run-")
    try:
        for index, run in enumerate(request["runs"]):
            stdout, stderr = Path(directory) / f"{index}.out", Path(directory) / f"{index}.err"
            pid = os.fork()
            if pid == 0:
                _child(run, stdout, stderr)
            _, status = os.waitpid(pid, 0)
            results.append(
                {
                    "returncode": os.waitstatus_to_exitcode(status),
                    "stdout": stdout.read_text(errors="replace") if stdout.exists() else "",
                    "stderr": stderr.read_text(errors="replace") if stderr.exists() else "",
                }
            )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    results_path.write_text(json.dumps(results))


if __name__ == "__main__":
    _serve(Path(sys.argv[1]), Path(sys.argv[2]))
