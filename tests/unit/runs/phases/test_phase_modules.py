"""Each Lambda function loads only its own phases, and ``mtrl.runs.pipeline`` names the same functions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mtrl.runs import pipeline
from mtrl.runs.phases import actions, evaluate, provision, reaper, register, report, run_view, slot, teardown, train
from mtrl.runs.phases import validate as validate_phase

REPO = Path(__file__).resolve().parents[4]
PROBE = """
import importlib.util, json, sys
loaded = {}
for function in sys.argv[1:]:
    for name in [name for name in sys.modules if name.startswith("mtrl.runs.phases")]:
        del sys.modules[name]  # each handler imports its phases afresh, as in its own function
    spec = importlib.util.spec_from_file_location(f"handler_{function}", f"lambda/{function}/handler.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    loaded[function] = sorted(name for name in sys.modules if name.startswith("mtrl.runs.phases."))
print(json.dumps(loaded))
"""
# The handler → the phase modules it may load (its own, and what those import).
LOADS = {
    "register": {"register", "context"},
    "acquire_slot": {"slot", "context"},
    "validate": {"validate", "inputs", "run_view", "context"},
    "report": {"report", "context"},
    "reaper": {"reaper", "report", "teardown", "run_view", "inputs", "context"},
    "backend": {"actions", "evaluate", "provision", "teardown", "train", "run_view", "inputs", "context"},
}


def test_each_handler_loads_only_its_phases() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    output = subprocess.run(
        [sys.executable, "-c", PROBE, *sorted(LOADS)], capture_output=True, text=True, check=True, env=env, cwd=REPO
    ).stdout
    loaded = json.loads(output.splitlines()[-1])
    assert {function: set(names) for function, names in loaded.items()} == {
        function: {f"mtrl.runs.phases.{name}" for name in names} for function, names in LOADS.items()
    }


def test_the_facade_names_the_phase_functions_themselves() -> None:
    assert pipeline.register is register.register
    assert pipeline.acquire_slot is slot.acquire_slot
    assert pipeline.validate is validate_phase.validate
    assert pipeline.split_keys is validate_phase.split_keys
    assert (pipeline.preflight, pipeline.provision) == (provision.preflight, provision.provision)
    assert (pipeline.submit, pipeline.check_status) == (train.submit, train.check_status)
    assert (pipeline.baseline, pipeline.evaluate) == (evaluate.baseline, evaluate.evaluate)
    assert pipeline.teardown is teardown.teardown
    assert pipeline.report is report.report
    assert pipeline.reap is reaper.reap
    assert pipeline.RunView is run_view.RunView
    assert pipeline.BACKEND_ACTIONS is actions.BACKEND_ACTIONS
    assert set(actions.BACKEND_ACTIONS) == {
        "preflight",
        "provision",
        "submit",
        "status",
        "baseline",
        "evaluate",
        "teardown",
    }


def test_every_phase_module_stays_small() -> None:
    for path in sorted((REPO / "mtrl" / "runs" / "phases").glob("*.py")):
        assert len(path.read_text().splitlines()) <= 300, path.name
