"""The options the README promises, checked on every command's own parser (issue 38 item 15): every command prints
JSON with --json, and every command that reaches a deployment finds it with --prefix, --region, --profile and
--endpoint-url. A new command that breaks the promise fails here, not in a user's script."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mtrl.cli import _commands

REPO_ROOT = Path(__file__).resolve().parents[3]
DEPLOYMENT_OPTIONS = {"--prefix", "--region", "--profile", "--endpoint-url"}
# Commands with no document to print: each says why.
NO_JSON = {
    "demo": "a guided walk-through: its output is the tour itself",
    "config docs": "prints the Markdown reference (docs/configuration.md)",
}
REACHES_A_DEPLOYMENT = {"submit", "runs", "status", "logs", "cancel", "cost"}


def _leaves(command: Any, path: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    real = command.real() if hasattr(command, "real") else command
    if hasattr(real, "commands"):
        for name, sub in real.commands.items():
            yield from _leaves(sub, (*path, name))
    else:
        yield " ".join(path), real


def _every_command() -> dict[str, set[str]]:
    return {
        path: {option for parameter in real.params for option in getattr(parameter, "opts", [])}
        for command in _commands()
        for path, real in _leaves(command, (str(command.name),))
    }


def test_every_command_takes_json_but_those_that_say_why_not() -> None:
    commands = _every_command()
    assert set(NO_JSON) <= set(commands), set(NO_JSON) - set(commands)
    missing = sorted(path for path, options in commands.items() if "--json" not in options and path not in NO_JSON)
    assert missing == []
    pointless = sorted(path for path in NO_JSON if "--json" in commands[path])
    assert pointless == []  # the list of exceptions stays true too


def test_every_command_that_reaches_a_deployment_takes_the_deployment_options() -> None:
    commands = _every_command()
    for path in REACHES_A_DEPLOYMENT:
        assert commands[path] >= DEPLOYMENT_OPTIONS, path
    others = sorted(path for path, options in commands.items() if options & DEPLOYMENT_OPTIONS)
    assert sorted(REACHES_A_DEPLOYMENT) == others


def test_the_readme_states_what_the_parsers_take() -> None:
    readme = " ".join((REPO_ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "Every command takes `--prefix`, `--region`, `--profile` and `--json`" not in readme
    claim = re.search(r"The commands that reach a deployment \(([^)]*)\) take", readme)
    assert claim is not None
    named = set(re.findall(r"`mtrl ([a-z]+)", claim.group(1)))
    assert named == REACHES_A_DEPLOYMENT
