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
        # The endpoint is private by default: public ranges alone name the lever (issue 36 item 5).
        (['eks_public_access_cidrs=["203.0.113.0/24"]'], "set eks_endpoint_access to 'public_and_private' too"),
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
    assert (shown["max_concurrent_runs"]["value"], shown["run_environment"]["value"]) == (2, "sop_support")


def test_a_pattern_filters_the_settings_and_json_keeps_each_values_source() -> None:
    # Issue 38 item 16: 442 lines with no filter, and --json dropped the source column.
    result = _show("*_minutes", "-c", "slot_lease_minutes=10", "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert "max_concurrent_runs" not in shown
    assert shown["slot_lease_minutes"] == {"value": 10, "source": "-c override"}
    assert shown["run_timeout_minutes"] == {"value": 720, "source": "default"}
    assert set(json.loads(_show("concurrent", "--json").stdout)) == {"max_concurrent_runs"}  # a substring
    table = _show("verl_max_steps")
    assert table.exit_code == 0, table.output
    assert "verl_max_steps" in table.stdout
    assert "prefix" not in table.stdout


def test_a_pattern_that_matches_nothing_is_refused_with_a_hint() -> None:
    result = _show("slot_lease_minute_count")
    assert result.exit_code == 2
    assert "no setting matches 'slot_lease_minute_count' (did you mean 'slot_lease_minutes'" in result.output


def test_a_public_endpoint_open_to_every_address_is_shown_with_the_synth_warning() -> None:
    show = ["config", "show", "--cdk-json", CDK_JSON, "eks_"]
    opened = ["-c", "eks_endpoint_access=public_and_private", "-c", 'eks_public_access_cidrs=["0.0.0.0/0"]']
    result = runner.invoke(cli, [*show, *opened])
    assert result.exit_code == 0, result.output
    assert "the EKS API endpoint answers every address on the internet" in " ".join(result.output.split())
    assert "answers every address" not in runner.invoke(cli, show).output  # the private default
