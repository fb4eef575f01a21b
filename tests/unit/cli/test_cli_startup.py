"""`mtrl` starts without the libraries of the commands it does not run (issue 38: start-up within 0.3 CPU-s).

The CPU figure is benchmarks/bench_validation.py's (`make bench B=validation`); this test keeps what the figure is
made of, the modules a command imports, through the real entry point in a fresh interpreter each time. It also keeps
the command table of ``mtrl.cli`` (which lists commands without importing them) equal to the commands themselves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from mtrl.cli import app
from mtrl.cli.lazy import LazyCommand

REPO = Path(__file__).resolve().parents[3]
# Run the real entry point and write the modules it imported, whatever way it exits.
_RUN = """
import atexit, json, os, sys
atexit.register(lambda: open(os.environ["MODULES_OUT"], "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["mtrl", *sys.argv[1:]]
from mtrl.cli import main
main()
"""
AWS_SDK = ("boto3", "botocore", "s3transfer")
CDK = ("aws_cdk", "jsii", "constructs")
MODEL_LIBRARIES = ("torch", "transformers", "trl", "peft", "openai")
PLOTS = ("matplotlib",)
NOT_FOR_LOCAL_WORK = (*AWS_SDK, *CDK, *MODEL_LIBRARIES, *PLOTS, "mtrl.client", "mtrl.backends.hyperpod")
DEPLOY_SETTINGS = ("mtrl.settings.deploy", "mtrl.settings.cluster", "mtrl.settings.network")
# pydantic and the models built on it: about 0.14 CPU-s over a bare interpreter to import and validate the deploy
# settings once (typer is pinned below 0.29 for this).
SETTINGS_MODELS = ("pydantic", "pydantic_core", "mtrl.settings.pipeline", "mtrl.settings.base")
# Typer's Rich help layout: it imports rich's Markdown renderer and markdown-it, about 0.3 CPU-s (issue 38: every
# command, --help included, starts within 0.3); help and usage errors use click's layout (mtrl.cli.lazy.HELP_MARKUP).
RICH_HELP = ("typer.rich_utils", "rich.markdown", "markdown_it", "rich.traceback")
# What playing an episode needs and looking environments up does not (`mtrl config show` checks run_environment).
FOR_EPISODES = (
    "asyncio",
    "sqlite3",
    "numpy",
    "yaml",
    "mtrl.envs.rollout",
    "mtrl.envs.episode_state",
    "mtrl.envs.tools",
    "mtrl.settings.docs",
)
# What `--help` of a command that talks to a deployment must not load: the SDK comes with the first AWS call.
REMOTE_HELP = (
    *AWS_SDK[:1],
    "s3transfer",
    *CDK,
    *MODEL_LIBRARIES,
    *PLOTS,
    *SETTINGS_MODELS,
    *RICH_HELP,
    "numpy",
    "msgspec",
)


def _imported(arguments: list[str], tmp_path: Path) -> set[str]:
    out = tmp_path / "modules.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "MODULES_OUT": str(out), "COLUMNS": "120"}
    subprocess.run([sys.executable, "-c", _RUN, *arguments], cwd=REPO, env=env, capture_output=True, check=False)
    return set(json.loads(out.read_text()))


def _present(modules: set[str], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(name for name in modules if name.split(".")[0] in forbidden or name.startswith(forbidden))


CASES: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "help": (
        ["--help"],
        (*NOT_FOR_LOCAL_WORK, *RICH_HELP, "numpy", "pydantic", "yaml", "msgspec", "mtrl.settings", "mtrl.validation"),
    ),
    "usage error": (["valdate"], (*NOT_FOR_LOCAL_WORK, *RICH_HELP, "numpy", "pydantic", "mtrl.settings")),
    "version": (["--version"], (*NOT_FOR_LOCAL_WORK, "numpy", "pydantic", "rich", "mtrl.settings", "mtrl.envs")),
    "validate": (
        ["validate", "environments/wordle/sample/train.jsonl", "--env", "wordle", "--json"],
        # No settings model at all: the limits are plain numbers (mtrl.settings.dataset_limits).
        (
            *NOT_FOR_LOCAL_WORK,
            *DEPLOY_SETTINGS,
            *SETTINGS_MODELS,
            "numpy",
            "mtrl.llm",
            "mtrl.local",
            "mtrl.runs",
            "rich",
        ),
    ),
    "env list": (
        ["env", "list", "--json"],
        (*NOT_FOR_LOCAL_WORK, *DEPLOY_SETTINGS, *SETTINGS_MODELS, "mtrl.llm", "mtrl.validation"),
    ),
    # The trainers (numpy, the local trainer's modules) load when a try or an evaluation starts, not for its help.
    "env try --help": (
        ["env", "try", "--help"],
        (*AWS_SDK, *CDK, *MODEL_LIBRARIES, *PLOTS, *RICH_HELP, "numpy", "mtrl.local"),
    ),
    "eval --help": (["eval", "--help"], (*AWS_SDK, *CDK, *MODEL_LIBRARIES, *PLOTS, *RICH_HELP, "numpy", "mtrl.local")),
    "sandbox --help": (["sandbox", "run", "--help"], (*NOT_FOR_LOCAL_WORK, *DEPLOY_SETTINGS, "numpy", "mtrl.envs")),
    # The settings are validated whole (pydantic, every settings module); the environment check only looks the
    # environments up: neither the rollout driver (asyncio) nor the episode state (sqlite3) loads, nor the reference
    # generator of `config docs` (issue 38: every command within 0.3 CPU-s).
    "config show": (["config", "show", "--cdk-json", str(REPO / "cdk.json")], (*NOT_FOR_LOCAL_WORK, *FOR_EPISODES)),
    "config show --json": (
        ["config", "show", "--json", "--cdk-json", str(REPO / "cdk.json")],
        (*NOT_FOR_LOCAL_WORK, *FOR_EPISODES),
    ),
    "config docs": (["config", "docs"], (*NOT_FOR_LOCAL_WORK, "numpy")),
    # An estimate reads the price book and the settings' region: no AWS SDK, no run-table client.
    "cost estimate": (
        ["cost", "--instance-type", "ml.p5.48xlarge", "--instances", "1", "--hours", "2", "--region", "us-east-1"],
        (*NOT_FOR_LOCAL_WORK, *FOR_EPISODES, "mtrl.cli.remote", "mtrl.runs"),
    ),
    "cost estimate from the settings' region": (
        ["cost", "--instance-type", "ml.p5.48xlarge", "--instances", "1", "--hours", "2"],
        (*NOT_FOR_LOCAL_WORK, *FOR_EPISODES, "mtrl.cli.remote", "mtrl.runs"),
    ),
    "config --help": (["config", "--help"], (*NOT_FOR_LOCAL_WORK, *RICH_HELP, "numpy")),
    "status --help": (
        ["status", "--help"],
        (*REMOTE_HELP, "mtrl.backends.hyperpod", "mtrl.llm", "mtrl.local", "mtrl.validation", "mtrl.envs", "mtrl.cost"),
    ),
    "submit --help": (["submit", "--help"], (*REMOTE_HELP, "mtrl.validation", "mtrl.envs", "mtrl.runs.manifest")),
    "cost --help": (["cost", "--help"], (*REMOTE_HELP, "botocore", "mtrl.cost", "mtrl.client")),
    "runs --help": (["runs", "--help"], (*REMOTE_HELP, "mtrl.envs", "mtrl.cost")),
    "image build --help": (["image", "build", "--help"], (*REMOTE_HELP, "mtrl.envs", "mtrl.backends.verl.catalog")),
    "model import --help": (["model", "import", "--help"], (*REMOTE_HELP, "mtrl.envs", "mtrl.client.builders")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_command_imports_only_what_it_needs(case: str, tmp_path: Path) -> None:
    arguments, forbidden = CASES[case]
    modules = _imported(arguments, tmp_path)
    assert "mtrl.cli" in modules  # the command really ran through the entry point
    assert _present(modules, forbidden) == []


def _first_paragraph(text: str | None) -> str:
    return (text or "").split("\n\n")[0].strip()


def _lazy_commands(group: Any) -> list[tuple[str, LazyCommand]]:
    found = []
    for name, command in getattr(group, "commands", {}).items():
        if isinstance(command, LazyCommand):
            found.append((name, command))
            found += [(f"{name} {sub}", lazy) for sub, lazy in _lazy_commands(command.real())]
    return found


def test_the_command_table_lists_each_command_with_its_own_help() -> None:
    commands = _lazy_commands(typer.main.get_command(app))
    assert [name for name, _ in commands] == [
        "cost", "eval", "health", "validate", "submit", "runs", "status", "logs", "cancel", "demo", "render", "config",
        "image", "model", "env", "env try", "sandbox",
    ]  # fmt: skip
    for name, command in commands:
        assert command.help == _first_paragraph(command.real().help), name
    env = dict(commands)["env"].real()
    assert list(env.commands) == ["try", "list", "check", "play"]


def test_listing_the_commands_imports_none(tmp_path: Path) -> None:
    modules = _imported(["--help"], tmp_path)
    assert [name for name in modules if name.startswith("mtrl.cli.") and name.endswith("_cmd")] == []


def test_a_mistyped_command_is_still_answered_with_the_right_one() -> None:
    result = CliRunner().invoke(app, ["valdate"])
    assert result.exit_code == 2
    assert "Did you mean 'validate'?" in result.output
