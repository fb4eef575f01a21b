"""`mtrl config show` through the real command: what synth refuses is refused here too (issue 38 items 10, 16)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mtrl.cli import app as cli

REPO_ROOT = Path(__file__).resolve().parents[3]
CDK_JSON = str(REPO_ROOT / "cdk.json")
runner = CliRunner()


def _show(*args: str) -> object:
    return runner.invoke(cli, ["config", "show", "--cdk-json", CDK_JSON, *args])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["run_environment=wordel"], "run_environment: no environment 'wordel' (did you mean 'wordle'?"),
        (["run_environment=template"], "'template' is a custom environment, which a deployment serves only with"),
        (
            ["max_concurrent_runs=2"],
            "'max_concurrent_runs': 2 runs at once would share the one training instance group",
        ),
    ],
)
def test_a_deployment_synth_would_refuse_is_refused(overrides: list[str], message: str) -> None:
    result = _show(*[arg for override in overrides for arg in ("-c", override)])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())


def test_the_emulators_concurrent_cpu_runs_and_a_served_environment_pass() -> None:
    result = _show("-c", "max_concurrent_runs=2", "-c", "emulator=true", "-c", "run_environment=sop_support", "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert (shown["max_concurrent_runs"], shown["run_environment"]) == (2, "sop_support")
