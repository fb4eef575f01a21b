"""docs/extending.md's walk-through, run as written from a fresh clone: the shell commands of "1. Start from the
template" and "3. Try it locally", parsed from the document, one after the other in a temporary copy of this
checkout, with the clone's `.venv` activated (what the document tells the reader to do first).

Three lines are not run, each for the reason in ``NOT_RUNNABLE`` (they name a model or a server the reader brings).
`mtrl demo --env my_env`, described in the same section, is run the same way by tests/unit/cli/demo.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.fresh_clone import REPO, fresh_clone

DOC = REPO / "docs" / "extending.md"
SECTIONS = ("### 1. Start from the template", "### 3. Try it locally")
# A command containing one of these is a template for the reader, not runnable here as written.
NOT_RUNNABLE = {
    "hf:Qwen/": "downloads a model from the Hugging Face hub (network)",
    "openai:http": "needs an OpenAI-compatible server the reader runs",
    "hf:PATH": "PATH is the reader's own saved model",
}


def walkthrough_commands(text: str) -> list[str]:
    """The bash lines of the walk-through's sections, comments dropped, in order."""
    commands: list[str] = []
    for heading in SECTIONS:
        section = text.split(heading, 1)[1].split("\n### ", 1)[0]
        for block in re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL):
            for line in block.splitlines():
                command = re.sub(r"\s+#\s.*$", "", line).strip()
                if command and not command.startswith("#"):
                    commands.append(command)
    return commands


def test_the_walkthrough_parses_into_the_commands_a_reader_types() -> None:
    commands = walkthrough_commands(DOC.read_text(encoding="utf-8"))
    assert commands[0] == "cp -r custom-environments/template custom-environments/my_env"
    assert "mtrl env check my_env" in commands
    assert any(command.startswith("mtrl env try my_env") for command in commands)
    skipped = [c for c in commands if any(marker in c for marker in NOT_RUNNABLE)]
    assert len(skipped) == 3, skipped  # exactly the three templated lines, nothing else silently dropped


def test_the_walkthrough_runs_as_written_in_a_fresh_clone(tmp_path: Path) -> None:
    clone = fresh_clone(tmp_path / "clone")
    environ = {
        **os.environ,
        # `source .venv/bin/activate`: the clone's environment first on PATH.
        "PATH": f"{clone / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "VIRTUAL_ENV": str(clone / ".venv"),
        # The shared test venv's editable install points at another checkout: make `mtrl` import this clone's code.
        "PYTHONPATH": str(clone),
    }
    environ.pop("MTRL_PROJECT_ROOT", None)
    ran = []
    for command in walkthrough_commands(DOC.read_text(encoding="utf-8")):
        if any(marker in command for marker in NOT_RUNNABLE):
            continue
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=clone,
            env=environ,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}"
        ran.append(command)
    assert (
        "my_env"
        in subprocess.run(
            ["bash", "-c", "mtrl env list"], cwd=clone, env=environ, capture_output=True, text=True, check=True
        ).stdout
    )
    assert len(ran) >= 7
