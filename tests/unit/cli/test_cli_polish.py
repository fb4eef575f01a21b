"""Frictions a new user met, one test each: help metavars, piped width, cost region, failure cause, metadata, …"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner

from mtrl.cli import app
from mtrl.cli.runs_cmd import status_renderable
from mtrl.client.runs import run_view
from mtrl.envs.registry import project_root
from mtrl.health.plots import learning_curve_figure

ROOT = project_root()


def test_help_shows_no_bool_metavar_for_flags() -> None:
    for args in (["--help"], ["env", "play", "--help"], ["env", "try", "--help"], ["cost", "--help"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0
        assert "<bool>" not in result.output, args
    assert "<int>" in CliRunner().invoke(app, ["env", "try", "--help"]).output  # options with values keep theirs


def test_piped_output_is_at_most_120_columns_and_keeps_long_values_whole(tmp_path: Path) -> None:
    # Issue 24, friction 6: piped output was padded to 1,000 columns (config show | less: 2,289-character lines).
    # Now at most 120 columns (or COLUMNS); a long value wraps whole instead (never cut at 80 or elided).
    long_uri = "s3://" + "b" * 150 + "/training-data/wordle.jsonl"
    script = (
        "from rich.table import Table\nfrom mtrl.cli.output import console\n"
        "t = Table()\nt.add_column('k')\nt.add_column('v', overflow='fold')\n"
        f"t.add_row('dataset', {long_uri!r})\nconsole.print(t)\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    out = tmp_path / "out.txt"
    with out.open("w") as handle:
        subprocess.run([sys.executable, "-c", script], stdout=handle, check=True, cwd=ROOT, env=env)
    lines = out.read_text().splitlines()
    assert max(len(line) for line in lines) <= 120
    assert "…" not in out.read_text()
    cells = "".join(line.split("│")[2].strip() for line in lines if line.count("│") == 3)
    assert long_uri in cells  # every character kept, folded over lines
    shown = subprocess.run(
        [sys.executable, "-m", "mtrl", "config", "show"], capture_output=True, text=True, check=True, cwd=ROOT, env=env
    )
    assert max(len(line) for line in shown.stdout.splitlines()) <= 120
    wide = subprocess.run(
        [sys.executable, "-m", "mtrl", "config", "show"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={**env, "COLUMNS": "160"},
    )
    assert max(len(line) for line in wide.stdout.splitlines()) == 160  # COLUMNS says otherwise


def test_config_errors_keep_the_patterns_brackets_and_name_the_key_the_user_set() -> None:
    # Issue 24, friction 4: Rich markup ate '[a-z0-9-]' ('^{1,18}$'), and a bad custom_env_id was reported as
    # run_environment.
    prefix = CliRunner().invoke(app, ["config", "show", "-c", "prefix=UPPER"])
    assert prefix.exit_code == 2
    assert "'^[a-z][a-z0-9-]{1,18}[a-z0-9]$'" in prefix.output
    custom = CliRunner().invoke(app, ["config", "show", "-c", "use_custom_env=true", "-c", "custom_env_id=Bad-Id"])
    assert custom.exit_code == 2
    assert "custom_env_id" in custom.output
    assert "run_environment" not in custom.output


def test_cost_takes_the_region_from_the_settings() -> None:
    result = CliRunner().invoke(
        app, ["cost", "--model", "openai-reasoning-gpt-oss-20b", "--sample-tokens", "1000", "--json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert "us-east-1" in json.dumps(document)  # cdk.json's region (the settings' default)


def test_status_shows_the_cause_not_the_lambda_wrapper_name() -> None:
    record = {
        "run_id": "broken-1",
        "status": "FAILED",
        "created_at": "2026-12-01T11:00:00Z",
        "finished_at": "2026-12-01T11:00:02Z",
        "phases": {"validate": {"started_at": "2026-12-01T11:00:01Z", "ended_at": "2026-12-01T11:00:02Z"}},
        "resources": [],
        "error": {"step": "Validate", "error": "Runtime.HandlerError", "cause": "dataset has 5 error(s): line 2"},
    }
    console = Console(record=True, width=200, force_terminal=False)
    console.print(status_renderable(run_view(record, now=datetime(2026, 12, 1, 11, 1, tzinfo=UTC))))
    text = console.export_text()
    assert "Runtime.HandlerError" not in text
    assert "dataset has 5 error(s): line 2" in text
    assert "Validate" in text


def test_env_try_steps_out_of_range_blames_steps_not_group_size() -> None:
    result = CliRunner().invoke(app, ["env", "try", "wordle", "--steps", "-3", "--json"])
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert "steps=-3" in error
    assert "group_size" not in error


def test_package_metadata_uses_an_spdx_license_and_a_bounded_build_backend() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    # setuptools deprecates the TOML-table form (`{text = ...}`) and warns at every install until 2027-02-18.
    assert project["project"]["license"] == "Apache-2.0"
    (backend,) = project["build-system"]["requires"]
    assert backend.startswith("setuptools>=77")
    assert ",<" in backend
    assert project["project"]["optional-dependencies"]["llm"][0] == "torch==2.13.0"  # exact: no CUDA build


def test_learning_curve_has_integer_ticks_labelled_axes_and_held_out_points() -> None:
    import matplotlib.pyplot as plt

    figure = learning_curve_figure(
        steps=[1, 2, 3],
        rewards=[0.1, 0.2, 0.4],
        train_success=[0.0, 0.5, 0.5],
        eval_steps=[0, 3],
        eval_success=[0.25, 0.75],
        title="t",
    )
    try:
        reward_axis, success_axis = figure.axes
        assert reward_axis.get_xlabel() == "GRPO step"
        assert reward_axis.get_ylabel()
        assert success_axis.get_ylabel()
        figure.canvas.draw()
        ticks = [
            tick for tick in reward_axis.get_xticks() if reward_axis.get_xlim()[0] <= tick <= reward_axis.get_xlim()[1]
        ]
        assert ticks
        assert all(float(tick).is_integer() for tick in ticks)
        (held_out,) = [line for line in success_axis.get_lines() if line.get_label() == "held-out success"]
        assert held_out.get_linestyle() == "None"  # points, not a line between measurements
        assert held_out.get_marker() == "o"
        assert list(held_out.get_xdata()) == [0, 3]
    finally:
        plt.close(figure)


def test_the_features_report_uses_the_shared_signal_headings_and_cost_cites_no_internal_seed(tmp_path: Path) -> None:
    # Issue 24, friction 10: three headings for the same figures (demo, features path, language-model path), and
    # `mtrl cost` pointed at "(seeds/000)", a document users do not have.
    tried = CliRunner().invoke(app, ["env", "try", "wordle", "--steps", "1", "--output", str(tmp_path / "w")])
    assert tried.exit_code == 0, tried.output
    for heading in ("mean spread, step 1", "zero-spread groups, step 1", "zero-spread groups, whole run"):
        assert heading in tried.stdout
    cost = CliRunner().invoke(app, ["cost", "--model", "openai-reasoning-gpt-oss-20b", "--sample-tokens", "1000"])
    assert cost.exit_code == 0, cost.output
    assert "seeds/" not in cost.output
