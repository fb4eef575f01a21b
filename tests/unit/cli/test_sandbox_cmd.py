"""`mtrl sandbox run`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mtrl.cli import app

runner = CliRunner()
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root (as in CI and the workers)")


def test_run_with_tests(tmp_path: Path) -> None:
    program = tmp_path / "prog.py"
    program.write_text("def double(x):\n    return x * 2\nprint('side effect')\n", encoding="utf-8")
    tests = tmp_path / "tests.py"
    tests.write_text(
        "from solution import double\n\ndef test_one():\n    assert double(2) == 4\n\n"
        "def test_two():\n    assert double(0) == 1\n",
        encoding="utf-8",
    )
    result = runner.invoke(app, ["sandbox", "run", str(program), "--tests", str(tests), "--json"])
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert (document["status"], document["tests_passed"], document["tests_total"]) == ("failed", 1, 2)
    assert document["stdout"] == "side effect\n"
    human = runner.invoke(app, ["sandbox", "run", str(program), "--tests", str(tests)])
    assert "1/2 passed" in human.stdout
    assert "test_two" in human.stdout


def test_timeout_and_missing_file(tmp_path: Path) -> None:
    program = tmp_path / "loop.py"
    program.write_text("while True:\n    pass\n", encoding="utf-8")
    result = runner.invoke(app, ["sandbox", "run", str(program), "--timeout", "0.5", "--json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["status"] == "timeout"
    missing = runner.invoke(app, ["sandbox", "run", str(tmp_path / "nope.py")])
    assert missing.exit_code == 2
