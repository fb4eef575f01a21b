"""Several ``python -m …`` / ``python -c …`` runs of one venv's interpreter for the price of one start-up.

A test that runs a venv's entry point several times (``.venv-verl``: every start imports torch and verl, about 12 CPU
seconds) hands the runs to :func:`run_forked`: one interpreter of that venv imports the heavy modules once, then
forks one child per run. Each child is a copy of the parent as it stood after the imports and nothing else (no run
ever executes in the parent, so nothing one run does reaches the next): it gets the run's own environment, working
directory and ``sys.argv``, executes the module or code as ``__main__`` the way the interpreter does, and exits with
the run's exit code, its stdout and stderr captured to files. The results come back as
``subprocess.CompletedProcess`` objects, one per run, in order.

What the interpreter reads only at start-up (``-X``/``-W`` options, ``sitecustomize``) is the parent's, so it is the
same for every run; a run's own ``PYTHONPATH`` is applied to ``sys.path`` by hand.
This file is also the parent's script (``python forked_runs.py <module to preload>…``, one JSON run a line on stdin):
stdlib only.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
import types
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MARK = "\x00forked-run "  # starts the parent's answer lines (anything else on its stdout came from an import)


@dataclass(frozen=True)
class Run:
    """One interpreter run: ``args`` as after ``python``: ``("-m", module, …)`` or ``("-c", code, …)``, optionally
    after ``-W <action>``."""

    args: tuple[str, ...]
    env: Mapping[str, str] | None = None  # the run's whole environment (as subprocess.run's env); None: the parent's
    cwd: str | None = None  # default: the parent's
    timeout: int = 600  # seconds; a run still going then is killed (SIGALRM)


class ForkServer:
    """One interpreter of ``python`` started with ``env`` in ``cwd`` (and interpreter ``options`` such as ``-W
    ignore``) that has imported ``preload``; :meth:`run` forks it for one run and returns that run's outcome."""

    def __init__(
        self,
        python: Path,
        *,
        preload: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        options: Sequence[str] = (),
    ) -> None:
        self.python = python
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115  # the parent's own stderr, read on failure
        self._process = subprocess.Popen(
            [str(python), *options, __file__, *preload],
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )

    def run(self, run: Run) -> subprocess.CompletedProcess[str]:
        assert self._process.stdin
        assert self._process.stdout
        self._process.stdin.write(json.dumps(asdict(run)) + "\n")
        self._process.stdin.flush()
        for line in self._process.stdout:
            if line.startswith(MARK):
                item = json.loads(line.removeprefix(MARK))
                return subprocess.CompletedProcess(
                    [str(self.python), *run.args], item["returncode"], item["stdout"], item["stderr"]
                )
        self._log.seek(0)
        raise RuntimeError(f"the forking parent ended ({self._process.wait()}):\n{self._log.read()[-4000:]}")

    def close(self) -> None:
        if self._process.stdin:
            self._process.stdin.close()
        self._process.wait(timeout=60)
        self._log.close()

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_forked(
    python: Path,
    runs: Sequence[Run],
    *,
    preload: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
) -> list[subprocess.CompletedProcess[str]]:
    """Start ``python`` once with ``env`` in ``cwd``, import ``preload``, then run each of ``runs`` in a fork."""
    with ForkServer(python, preload=preload, env=env, cwd=cwd) as server:
        return [server.run(run) for run in runs]


def _exit_code(error: SystemExit) -> int:
    """What the interpreter exits with for ``SystemExit(code)``."""
    if error.code is None:
        return 0
    if isinstance(error.code, int):
        return error.code
    print(error.code, file=sys.stderr)
    return 1


def _become_environment(env: Mapping[str, str]) -> None:
    """The run's environment, and the path its ``PYTHONPATH`` gives (read at start-up, so set here by hand)."""
    before = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    os.environ.clear()
    os.environ.update(env)
    after = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    if before != after:
        rest = [entry for entry in sys.path[1:] if entry not in before]
        sys.path[1:] = [*(os.path.abspath(entry) for entry in after), *rest]


def _child(run: Mapping[str, Any], stdout: Path, stderr: Path) -> None:
    """In the forked child: become the run, then exit with its code (never returns)."""
    code = 1
    try:
        for fd, path in ((1, stdout), (2, stderr)):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(target, fd)
            os.close(target)
        if run["env"] is not None:
            _become_environment(run["env"])
        signal.alarm(run["timeout"])
        if run["cwd"]:
            os.chdir(run["cwd"])
        args = list(run["args"])
        while args[:1] == ["-W"]:  # `python -W <action>`: the same filter, put first as the interpreter does
            warnings.simplefilter(args[1])
            del args[:2]
        flag, target_name, *rest = args
        try:
            if flag == "-m":
                # What `python -m` puts first on the path (the working directory), and argv[0] is set by runpy.
                sys.path[0] = os.getcwd()
                sys.argv = [target_name, *rest]
                runpy.run_module(target_name, run_name="__main__", alter_sys=True)
            elif flag == "-c":
                sys.path[0] = ""
                sys.argv = ["-c", *rest]
                main = types.ModuleType("__main__")  # what `python -c` runs in (not this file's module)
                sys.modules["__main__"] = main
                exec(compile(target_name, "<string>", "exec"), main.__dict__)
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


def _serve(preload: Sequence[str]) -> None:
    sys.path[0] = os.getcwd()  # not this file's folder: the path every run starts from
    for module in preload:
        importlib.import_module(module)
    sys.stdout.flush()
    sys.stderr.flush()
    # Not a TemporaryDirectory: its finalizer would run in the children's exit functions and remove it.
    directory = tempfile.mkdtemp(prefix="forked-run-")
    try:
        for index, line in enumerate(sys.stdin):
            run = json.loads(line)
            stdout, stderr = Path(directory) / f"{index}.out", Path(directory) / f"{index}.err"
            pid = os.fork()
            if pid == 0:
                _child(run, stdout, stderr)
            _, status = os.waitpid(pid, 0)
            item = {
                "returncode": os.waitstatus_to_exitcode(status),
                "stdout": stdout.read_text(errors="replace") if stdout.exists() else "",
                "stderr": stderr.read_text(errors="replace") if stderr.exists() else "",
            }
            sys.stdout.write(MARK + json.dumps(item) + "\n")
            sys.stdout.flush()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    _serve(sys.argv[1:])
