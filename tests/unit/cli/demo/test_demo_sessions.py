"""`mtrl demo --backend sessions` (issue 37 item 6): the real pipeline in the embedded emulator, the sessions backend
driving its local training service (torch + PEFT LoRA on the tiny model) from the backend function's status polls, in
this interpreter (``MTRL_LLM_PYTHON``: the emulator's Lambda runtime has no torch). The end-to-end test runs the real
command as a user does and reads what it printed beside what it fetched out of the emulator; the others refuse bad
choices before anything starts, and check the tables on fixed figures."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from mtrl.cli.demo import REPO_ROOT
from mtrl.cli.demo.plan import EVAL_KEY, SESSIONS_OPTIONS, plan_for
from mtrl.cli.demo.tables import mean_sampler_kl, sessions_tables
from mtrl.emulator import find_emulator

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _eval_words() -> int:
    return sum(1 for line in plan_for().eval_path.read_text().splitlines() if line.strip())


@pytest.mark.skipif(find_emulator() is None, reason="the emulator is not installed (make emulator)")
def test_the_sessions_demo_trains_the_tiny_model_through_the_pipeline_and_shows_its_summary(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the mtrl[llm] extra (make test installs it)")
    environ = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "160"}
    command = [sys.executable, "-m", "mtrl", "demo", "--backend", "sessions", "--work-dir", str(tmp_path)]
    completed = subprocess.run(command, cwd=REPO_ROOT, env=environ, capture_output=True, text=True, check=False)
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-6000:]
    assert re.search(r"demo passed in \d+ s", output)
    assert re.search(r"the run took \d+ s \(wall clock", output)
    assert "selecting the `sessions` backend" in output
    assert "local training service" in output

    [run_dir] = [path for path in tmp_path.glob("wordle-demo-*") if (path / "summary.json").is_file()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "SUCCEEDED"
    assert summary["settings"]["backend"] == "sessions"
    assert summary["resources_remaining"] == []
    assert {"validate", "preflight", "train", "evaluate", "teardown"} <= set(summary["phases"])

    progress = json.loads((run_dir / "sessions" / "progress.json").read_text())
    steps = SESSIONS_OPTIONS["steps"]
    assert (progress["service"], progress["phase"], progress["step"]) == ("local", "done", steps)
    assert progress["before"]["tasks"] == progress["after"]["tasks"] == _eval_words()
    rows = progress["rows"]
    assert [row["step"] for row in rows] == list(range(1, steps + 1))
    signals = [json.loads(line) for line in (run_dir / "signals.jsonl").read_text().splitlines() if line.strip()]
    assert [row["step"] for row in signals[1:]] == [row["step"] for row in rows]

    # The same summary as the local demo: the run's table and the held-out rows on the sample's eval.jsonl.
    assert "backend / environment │ sessions / wordle" in output
    assert f"the sample's eval.jsonl, {_eval_words()} words" in output
    assert "untrained (tiny model, no adapter)" in output
    assert f"trained ({steps} GRPO steps, LoRA)" in output
    # The signal rows, each with the mismatch figure the loop measured for its step (— where no step trained).
    table = output.split("signal rows (signals.jsonl)", 1)[1]
    for row in rows:
        line = next(line for line in table.splitlines() if re.match(rf"│\s+{row['step']} │", line))
        kl = row.get("sampler_kl")
        assert line.rstrip(" │").endswith("—" if kl is None else f"{kl:.2g}"), (row, line)
    # A step trains only on groups with spread (the tiny model's rewards mostly tie; seed 7 gave one such step here):
    # every step that trained has its mismatch figure, and the line under the table is their mean.
    assert all(isinstance(row.get("sampler_kl"), float) for row in rows if row["trained_episodes"]), rows
    mismatch = mean_sampler_kl(rows)
    assert f"mean over the steps that trained: {'—' if mismatch is None else f'{mismatch:.2g}'}" in output
    # The health rows: the verdict the pipeline's status poll wrote (health.json), rule by rule.
    health = json.loads((run_dir / "health.json").read_text())
    assert f"verdict: {health['verdict']}" in output
    for rule in health["rules"]:
        assert re.search(rf"│ {rule}\s+│", output), rule


def test_the_sessions_demo_refuses_bad_choices_before_anything_starts(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from mtrl.cli import app

    work = tmp_path / "demo"
    for args, expected in (
        (["--backend", "verl"], "the demo runs local or sessions offline"),
        (["--backend", "sessions", "--policy", "features"], "--policy is the local backend's"),
        (["--backend", "sessions", "-H", "service=sagemaker"], "the demo runs offline, on the local training service"),
        (["--backend", "sessions", "-H", "lora_rank=0"], "lora_rank"),
        (["--backend", "sessions", "-H", "base_model=relative/dir"], "absolute path"),
        (["--backend", "sessions", "-H", "stepz=2"], "stepz"),
    ):
        result = CliRunner().invoke(app, ["demo", *args, "--work-dir", str(work)])
        assert result.exit_code == 2, (args, result.output)
        assert expected in result.output, (args, result.output)
    assert not work.exists()  # refused before the synth, the emulator or any run


def test_the_sessions_plan_selects_the_local_service_and_takes_options() -> None:
    plan = plan_for(backend="sessions", hyperparameters={"steps": 2})
    assert plan.backend == "sessions"
    assert plan.manifest == {
        "backend": "sessions",
        "environment": "wordle",
        "backend_options": {**SESSIONS_OPTIONS, "steps": 2},
        "eval_dataset": EVAL_KEY,
    }
    assert plan.policy == "tiny"
    assert not plan.hand_set_heuristic
    assert "local training service" in plan.policy_line


def _printed(renderables: list[Any]) -> str:
    console = Console(record=True, width=200, force_terminal=False)
    for renderable in renderables:
        console.print(renderable)
    return console.export_text()


def test_the_sessions_tables_show_the_mismatch_per_step_and_its_mean_over_trained_steps() -> None:
    rows: list[dict[str, Any]] = [
        {"step": 1, "reward_mean": -1.5, "zero_spread_share": 1.0, "trained_episodes": 0, "infra_failed": 1},
        {"step": 2, "reward_mean": -1.2, "trained_episodes": 4, "infra_failed": 0, "loss": 3.8, "sampler_kl": 2e-3},
        {"step": 3, "reward_mean": -1.0, "trained_episodes": 2, "infra_failed": 0, "loss": 1.0, "sampler_kl": 4e-3},
    ]
    progress = {
        "step": 3,
        "rows": rows,
        "before": {"tasks": 50, "reward_mean": -1.5, "success_share": 0.0},
        "after": {"tasks": 50, "reward_mean": -1.0, "success_share": 0.1},
    }
    health = {
        "verdict": "ok",
        "last_step": 3,
        "planned_steps": 3,
        "warmup_steps": 5,
        "window_steps": 10,
        "fired": [],
        "rules": {"flat_groups": {"level": "ok", "worst": "ok", "segments": []}},
    }
    text = _printed(sessions_tables(plan_for(backend="sessions"), progress, health))
    lines = {line.split("│")[1].strip(): line for line in text.splitlines() if line.count("│") > 6}
    assert lines["1"].rstrip(" │").endswith("—")  # no step data, no mismatch figure: never a 0
    assert lines["2"].rstrip(" │").endswith("0.002")
    assert lines["3"].rstrip(" │").endswith("0.004")
    assert "mean over the steps that trained: 0.003" in text
    assert "│ 10%" in text  # held-out success after
    assert "verdict: ok" in text
    assert "flat_groups" in text
    missing = _printed(sessions_tables(plan_for(backend="sessions"), {"step": 0, "rows": []}, None))
    assert "mean over the steps that trained: —" in missing
    assert "no training-health verdict" in missing
    assert "wrote no sessions progress" in _printed(sessions_tables(plan_for(backend="sessions"), None, None))
