"""Defect 8 (issue 10): every venv the project builds is consistent (`pip check`): .venv (make setup),
.venv-emulator (make emulator) and .venv-nova (make nova, the runner image's environment, where sagemaker-core
requires rich<15 while runtime.txt used to pin rich 15)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.contract.tier import skip_or_fail

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("venv", [".venv", ".venv-emulator", ".venv-nova"])
def test_pip_check_passes(venv: str, tmp_path: Path) -> None:
    python = ROOT / venv / "bin" / "python"
    if not python.exists():
        skip_or_fail(f"{venv} is missing (make setup emulator nova)")
    # Only what the venv has installed: from the checkout (or with PYTHONPATH pointing at it), pip would also check
    # the mtrl.egg-info an editable install leaves there against a venv that does not install mtrl (.venv-emulator).
    environ = {key: value for key, value in os.environ.items() if key not in {"PYTHONPATH", "PYTHONHOME"}}
    result = subprocess.run(
        [str(python), "-m", "pip", "check"], capture_output=True, text=True, check=False, cwd=tmp_path, env=environ
    )
    assert result.returncode == 0, result.stdout + result.stderr
