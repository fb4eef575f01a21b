"""Training in another interpreter: where a backend function's own runtime has no torch (the emulator's Lambda runtime,
like a real one), a backend's CPU training with a language model runs as ``python -m MODULE ARGS`` in the interpreter
``MTRL_LLM_PYTHON`` names (one with the ``mtrl[llm]`` extra), and reads and writes the run's state in S3 exactly as it
would in-process, so the poll that started it reads the outcome back.

Used by the ``local`` backend (an ``hf:`` policy: ``mtrl.backends.local_llm``) and the ``sessions`` backend (its local
training service: ``mtrl.backends.sessions.task``); `mtrl demo` sets the variable to its own interpreter.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

LLM_PYTHON_ENV = "MTRL_LLM_PYTHON"
# What a language model's CPU training imports (the mtrl[llm] extra).
LLM_PACKAGES = ("torch", "transformers", "peft")
TIMEOUT_S = 13 * 60.0  # a run's share of one status poll, inside the backend function's 15-minute timeout


class LlmPythonError(RuntimeError):
    """The other interpreter is not configured, did not start, timed out or failed (its last lines say why)."""


def missing_here(packages: Sequence[str] = LLM_PACKAGES) -> list[str]:
    """Which of ``packages`` this interpreter cannot import."""
    return [name for name in packages if importlib.util.find_spec(name) is None]


def llm_python() -> str | None:
    """The interpreter ``MTRL_LLM_PYTHON`` names, or None."""
    return os.environ.get(LLM_PYTHON_ENV) or None


def run_module(module: str, args: Sequence[str], *, region: str, timeout_s: float) -> None:
    """``python -m module *args`` in the ``MTRL_LLM_PYTHON`` interpreter, with this function's code first on its path
    (a Lambda's code asset: the same mtrl) and this environment (its AWS endpoint and credentials); raises
    ``LlmPythonError``."""
    python = llm_python()
    if python is None:
        raise LlmPythonError(f"no interpreter with torch: this runtime lacks it and {LLM_PYTHON_ENV} is not set")
    code_root = Path(__file__).resolve().parents[2]  # the directory holding this mtrl
    environ = {**os.environ, "PYTHONPATH": str(code_root), "AWS_DEFAULT_REGION": region}
    try:
        completed = subprocess.run(
            [python, "-m", module, *args], env=environ, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise LlmPythonError(f"{module} in {python} did not finish: {error}") from error
    if completed.returncode != 0:
        tail = (completed.stderr or completed.stdout).strip().splitlines()[-5:]
        raise LlmPythonError(f"{module} in {python} exited {completed.returncode}: " + " | ".join(tail))
