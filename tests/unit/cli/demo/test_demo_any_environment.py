"""`mtrl demo --env ENV` through the real entry point, in a fresh clone: a custom environment copied from the
template (no feature agent: the language-model policy, TRL GRPO + LoRA on hf:tiny-random) and sop_support (its
feature agent). Each run is the real pipeline in the embedded emulator — synth, deploy, `mtrl submit --watch`,
Validate → preflight → train → evaluate → teardown → report — and the demo fetches the run's summaries and signal
rows out of the emulator before it stops, which is what these tests read. Both runs use one work directory, as a
user running the two demos one after the other would: the first synthesizes, the second deploys the same cdk.out
(its inputs are unchanged) into its own emulator."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mtrl.emulator import find_emulator
from tests.fresh_clone import fresh_clone

pytestmark = pytest.mark.skipif(find_emulator() is None, reason="the emulator is not installed (make emulator)")

CUSTOM = "my_env"
# Plumbing-sized: one GRPO step, one short reply per episode, two held-out tasks.
TINY = ("-H", "steps=1", "-H", "max_new_tokens=8", "-H", "max_turns=1", "-H", "eval_tasks=2")


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = fresh_clone(tmp_path_factory.mktemp("clone"))
    # What docs/extending.md tells a reward designer to do.
    shutil.copytree(root / "custom-environments" / "template", root / "custom-environments" / CUSTOM)
    package = root / "custom-environments" / CUSTOM / "__init__.py"
    package.write_text(package.read_text().replace('ENV_ID = "template"', f'ENV_ID = "{CUSTOM}"'))
    return root


def _demo(clone: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    work = clone / ".build-demo"
    environ = {**os.environ, "PYTHONPATH": str(clone), "COLUMNS": "120"}
    environ.pop("MTRL_PROJECT_ROOT", None)
    command = [sys.executable, "-m", "mtrl", "demo", *args, "--work-dir", str(work)]
    completed = subprocess.run(command, cwd=clone, env=environ, capture_output=True, text=True, check=False)
    return completed, work


def _outputs(work: Path, env_id: str) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    stem = f"{env_id.replace('_', '-')}-demo-"  # the run id starts with the uploaded sample's name
    [run_dir] = [path for path in work.glob(f"{stem}*") if (path / "summary.json").is_file()]
    summary = json.loads((run_dir / "summary.json").read_text())
    training = json.loads((run_dir / "local" / "summary.json").read_text())
    signals = [json.loads(line) for line in (run_dir / "signals.jsonl").read_text().splitlines() if line.strip()]
    return summary, training, signals


def _assert_pipeline_run(summary: dict[str, Any], env_id: str) -> None:
    assert summary["status"] == "SUCCEEDED"
    assert summary["settings"]["environment"] == env_id
    assert summary["settings"]["backend"] == "local"
    assert summary["resources_remaining"] == []
    assert {"validate", "preflight", "train", "evaluate", "teardown"} <= set(summary["phases"])


def test_a_custom_environment_from_the_template_trains_with_the_language_model(clone: Path) -> None:
    completed, work = _demo(clone, "--env", CUSTOM, *TINY)
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-5000:]
    assert "demo passed" in output
    assert "hf:tiny-random" in output
    assert "plumbing check" in output
    summary, training, signals = _outputs(work, CUSTOM)
    _assert_pipeline_run(summary, CUSTOM)
    assert training["config"]["policy"] == "hf:tiny-random"
    assert training["steps"] == 1
    heldout = training["heldout"]
    assert heldout["tasks"] == 2
    assert heldout["evaluation_measure"] == "evaluation"  # the template declares an EVALUATION
    assert heldout["evaluation_before"] is not None
    assert heldout["evaluation_after"] is not None
    assert {"correct", "closeness", "hint_cost"} <= set(training["signal_health"])
    header, rows = signals[0], signals[1:]
    assert header["planned_steps"] == 1
    assert [row["step"] for row in rows] == [1]
    assert rows[0]["reward_mean"] is not None
    assert rows[0]["mean_turns"] == 1.0


def test_sop_support_trains_with_its_feature_policy(clone: Path) -> None:
    completed, work = _demo(clone, "--env", "sop_support")
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-5000:]
    assert "not a language model" in output
    summary, training, signals = _outputs(work, "sop_support")
    _assert_pipeline_run(summary, "sop_support")
    assert training["config"]["policy"] == "features"
    heldout = training["heldout"]
    assert heldout["tasks"] == 18  # the sample's own eval.jsonl, every ticket
    assert heldout["success_before"] <= 0.2
    assert heldout["success_after"] >= 0.8
    assert len(signals) == 1 + training["steps"]
