"""app.py and the mtrl command as a user runs them: real processes, real exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from mtrl import __version__
from mtrl.cli import app as cli

REPO_ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _synth(context: dict[str, object], outdir: Path) -> subprocess.CompletedProcess[str]:
    # This is how the CDK CLI hands cdk.json context and -c overrides to the app.
    env = {
        **os.environ,
        "CDK_CONTEXT_JSON": json.dumps(context),
        "CDK_OUTDIR": str(outdir),
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    env.pop("CDK_DEFAULT_ACCOUNT", None)
    return subprocess.run(
        [sys.executable, "app.py"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_bad_override_fails_synth_with_one_clear_message(tmp_path: Path) -> None:
    result = _synth({"vpc_cidr": "10.0.0.0/40"}, tmp_path)
    assert result.returncode == 2
    assert "error: invalid configuration: setting 'vpc_cidr': not a valid IPv4 CIDR" in result.stderr
    assert not list(tmp_path.glob("*.template.json"))


def test_synth_refuses_an_environment_the_deployment_does_not_serve(tmp_path: Path) -> None:
    # Issue 38 item 10: a misspelt run_environment used to synthesize, and every run failed on the workers.
    result = _synth({"run_environment": "wordel"}, tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "run_environment: no environment 'wordel' (did you mean 'wordle'?" in result.stderr
    assert not list(tmp_path.glob("*.template.json"))


def test_synth_works_offline_without_credentials_or_account(tmp_path: Path) -> None:
    context = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    result = _synth(context, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    templates = sorted(p.name for p in tmp_path.glob("*.template.json"))
    assert {"mtrl-data.template.json", "mtrl-network.template.json"} <= set(templates)


def test_version() -> None:
    result = runner.invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"mtrl {__version__}"


def test_config_show_prints_effective_settings_with_overrides(monkeypatch: object) -> None:
    cdk_json = str(REPO_ROOT / "cdk.json")
    args = ["config", "show", "--cdk-json", cdk_json, "-c", "az_count=3", "-c", "account=123456789012", "--json"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["az_count"] == {"value": 3, "source": "-c override"}
    assert shown["prefix"] == {"value": "mtrl", "source": "cdk.json"}
    # Without an account nor AZ names a synth could name only 2 AZs: config show refuses rather than say 3.
    refused = runner.invoke(cli, ["config", "show", "--cdk-json", str(REPO_ROOT / "cdk.json"), "-c", "az_count=3"])
    assert refused.exit_code != 0
    assert "pass availability_zones" in refused.output


def test_config_show_refuses_a_custom_environment_synth_would_refuse() -> None:
    # Issue 14: a bad custom_env_id used to pass `mtrl config show` and fail only at synth.
    base = ["config", "show", "--cdk-json", str(REPO_ROOT / "cdk.json"), "-c", "use_custom_env=true"]
    missing = runner.invoke(cli, [*base, "-c", "custom_env_id=no_such_env"])
    assert missing.exit_code == 2, missing.output
    assert "custom environment 'no_such_env' (custom-environments/)" in missing.output
    assert "Traceback" not in missing.output
    good = runner.invoke(cli, [*base, "-c", "custom_env_id=template", "--json"])
    assert good.exit_code == 0, good.output
    assert json.loads(good.stdout)["custom_env_id"]["value"] == "template"


def test_config_show_table_names_the_source_of_each_value() -> None:
    result = runner.invoke(
        cli, ["config", "show", "--cdk-json", str(REPO_ROOT / "cdk.json"), "-c", "nat_gateways=per_az"]
    )
    assert result.exit_code == 0
    assert "-c override" in result.stdout
    assert "cdk.json" in result.stdout


def test_config_show_bad_value_is_one_clear_error() -> None:
    result = runner.invoke(cli, ["config", "show", "--cdk-json", str(REPO_ROOT / "cdk.json"), "-c", "region=moon-1"])
    assert result.exit_code == 2
    assert "setting 'region': unknown AWS region" in result.output


def test_config_show_rejects_malformed_override_and_missing_file(tmp_path: Path) -> None:
    malformed = runner.invoke(cli, ["config", "show", "--cdk-json", str(REPO_ROOT / "cdk.json"), "-c", "novalue"])
    assert malformed.exit_code == 2
    assert "expected key=value" in malformed.output
    missing = runner.invoke(cli, ["config", "show", "--cdk-json", str(tmp_path / "nope.json")])
    assert missing.exit_code == 2
    assert "not found" in missing.output
