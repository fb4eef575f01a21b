"""`make demo` end to end, as a new user runs it: synth, emulator, a trained run, a rejected dataset."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from mtrl.cli.demo.plan import plan_for
from mtrl.cli.demo.run import MALFORMED_DATASET, run_demo
from mtrl.emulator import find_emulator

ROW_LABELS = ("untrained (all weights 0)", "hand-set heuristic (consistent = 1", "trained (20 GRPO steps)")

pytestmark = pytest.mark.skipif(find_emulator() is None, reason="the emulator is not installed (make emulator)")


def test_demo_trains_a_run_and_rejects_the_malformed_dataset(tmp_path: Path) -> None:
    console = Console(record=True, width=120, force_terminal=False)
    result = run_demo(work_dir=tmp_path, console=console)
    output = console.export_text()

    assert result.run_succeeded, output[-4000:]
    assert result.summary["status"] == "SUCCEEDED"
    assert result.summary["settings"]["backend"] == "local"
    assert result.summary["resources_remaining"] == []
    assert {"register", "validate", "teardown"} <= set(result.summary["phases"])
    assert "held-out evaluation" in output
    # The policy says what it is, and the held-out split is the sample's own eval.jsonl, everywhere.
    assert "not a language model" in output
    assert "0 held out" not in output
    eval_words = sum(1 for line in plan_for().eval_path.read_text().splitlines() if line.strip())
    assert f"the sample's eval.jsonl, {eval_words} words" in output
    rows = {label: output.split(label, 1)[1].split("\n", 1)[0] for label in ROW_LABELS}
    assert all("%" in row for row in rows.values()), rows
    assert "follow it with" not in output  # a hint for a command that cannot work once the emulator stops
    assert list(tmp_path.glob("*.png")), "the learning-curve plot was not fetched"

    assert result.rejected_before_provisioning, output[-4000:]
    assert result.ok
    for line in range(2, len(MALFORMED_DATASET.splitlines()) + 1):
        assert f"│ {line:>4} │" in output or f"│    {line} │" in output
    assert "demo passed" in output
