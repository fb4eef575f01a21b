"""`mtrl demo`'s own flow through the real command, its emulator and pipeline replaced by fakes (the whole demo runs
in tests/unit/cli/demo/test_demo.py): a failed run stops it with the cause, --keep-emulator keeps the emulator and
says how to reach it, and the held-out title says how many tasks the run evaluates (issue 38 items 13 and 14)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from mtrl.cli import app as cli
from mtrl.cli.demo import run as demo_run

RUN_ID = "my-env-demo-20261207T230000Z-0a1b2c3d"
ENDPOINT = "http://127.0.0.1:45999"
OVERLAP = "line 3: the same prompt and answer are in the evaluation dataset (line 1)"


class _FakeEmulator:
    def __init__(self, **_: Any) -> None:
        self.endpoint_url = ENDPOINT
        self.client_kwargs = {"endpoint_url": ENDPOINT}

    def __enter__(self) -> _FakeEmulator:
        return self

    def __exit__(self, *_: object) -> None:
        pass


@pytest.fixture
def failing_run(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The pipeline refuses the demo's run at Validate (a train/eval overlap); returns the `mtrl` calls made."""
    calls: list[list[str]] = []

    def run_mtrl(args: list[str], emulator: Any, *, capture: bool = False) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        view = {
            "status": "FAILED",
            "error": {"step": "Validate", "error": "DatasetInvalid", "cause": f"run {RUN_ID}: {OVERLAP}"},
        }
        stdout = json.dumps(view) if "--json" in args else ""
        return subprocess.CompletedProcess(args, 1, stdout, "")

    monkeypatch.setattr(demo_run, "synthesize", lambda cdk_out, console: None)
    monkeypatch.setattr(demo_run, "Emulator", _FakeEmulator)
    monkeypatch.setattr(demo_run, "session_for", lambda kwargs: SimpleNamespace())  # no client: nothing else runs
    stack = SimpleNamespace(ok=True, stack_name="mtrl-pipeline", status="CREATE_COMPLETE", failures=[])
    monkeypatch.setattr(demo_run, "deploy_app", lambda session, out, stacks: [stack])
    monkeypatch.setattr(demo_run, "run_mtrl", run_mtrl)
    monkeypatch.setattr(demo_run, "run_ids", lambda session: [RUN_ID])
    return calls


def test_a_failed_run_stops_the_demo_with_its_cause(
    made_env_root: Path, tmp_path: Path, failing_run: list[list[str]]
) -> None:
    result = CliRunner().invoke(cli, ["demo", "--env", "my_env", "--work-dir", str(tmp_path)])
    output = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert f"run {RUN_ID} ended FAILED at Validate: run {RUN_ID}: {OVERLAP}" in output
    assert "[4/5]" not in output  # no empty summary
    assert "[5/5]" not in output  # nor the malformed upload's rejection afterwards
    assert [call[0] for call in failing_run] == ["submit", "status"]
    assert "demo failed" in output
    # The title says how many of the held-out tasks the run evaluates (eval_tasks 4 of the template's 6).
    assert "eval.jsonl (6 tasks, uploaded to eval-data/my-env-demo-eval.jsonl; the run evaluates the first 4)" in output


def test_keep_emulator_keeps_it_and_says_how_to_reach_it(
    made_env_root: Path, tmp_path: Path, failing_run: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    waited: list[bool] = []
    monkeypatch.setattr(demo_run, "wait_for_interrupt", lambda: waited.append(True))
    result = CliRunner().invoke(cli, ["demo", "--env", "my_env", "--work-dir", str(tmp_path), "--keep-emulator"])
    output = " ".join(result.output.split())
    assert waited == [True]
    assert "the emulator keeps running (Ctrl-C stops it)" in output
    assert "export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1" in output
    assert f"mtrl runs --endpoint-url {ENDPOINT} --prefix mtrl" in output
    plain = CliRunner().invoke(cli, ["demo", "--env", "my_env", "--work-dir", str(tmp_path / "again")])
    assert "the emulator is stopped" in " ".join(plain.output.split())
    assert waited == [True]  # without the option the demo never waits
