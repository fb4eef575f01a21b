"""`mtrl config show` through the real command: what synth refuses is refused here too (issue 38 items 10, 16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from mtrl.cli import app as cli

REPO_ROOT = Path(__file__).resolve().parents[3]
CDK_JSON = str(REPO_ROOT / "cdk.json")
runner = CliRunner()


def _show(*args: str) -> Result:
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


def test_the_table_keeps_every_setting_name_and_source_whole() -> None:
    # Issue 38 (start-up within 0.3 CPU-s): the columns are sized from the rows instead of rich measuring all ~400
    # cells twice. Names and sources never fold (at 120 columns rich folded the 36-character
    # 'serverless_adopt_model_package_group'); value and description share the rest, and the table still fills
    # the width it is given.
    from mtrl.settings.deploy import DeploySettings

    env = {**os.environ, "COLUMNS": "120", "PYTHONPATH": str(REPO_ROOT)}
    shown = subprocess.run(
        [sys.executable, "-m", "mtrl", "config", "show", "--cdk-json", CDK_JSON],
        capture_output=True, text=True, check=True, cwd=REPO_ROOT, env=env,
    )  # fmt: skip
    lines = shown.stdout.splitlines()
    first_cells = {line.split("│")[1].strip() for line in lines if line.count("│") == 5}
    assert set(DeploySettings.model_fields) <= first_cells
    assert {line.split("│")[3].strip() for line in lines if line.count("│") == 5} - {""} <= {
        "cdk.json",
        "default",
        "environment",
    }
    assert max(len(line) for line in lines) == 120


@pytest.mark.parametrize("width", [40, 60, 80])
def test_a_narrow_terminal_still_gets_every_setting(width: int) -> None:
    # Too narrow to keep names whole (under 40 columns left for value and description): rich lays the table out.
    env = {**os.environ, "COLUMNS": str(width), "PYTHONPATH": str(REPO_ROOT)}
    shown = subprocess.run(
        [sys.executable, "-m", "mtrl", "config", "show", "prefix", "--cdk-json", CDK_JSON],
        capture_output=True, text=True, check=True, cwd=REPO_ROOT, env=env,
    )  # fmt: skip
    assert max(len(line) for line in shown.stdout.splitlines()) <= width
    assert "prefix" in shown.stdout
