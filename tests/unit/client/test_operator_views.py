"""What an operator reads in `mtrl status` and `mtrl runs` about cancelled, queued and listed runs (issue 38 item 12),
through the real commands against a moto deployment whose records the pipeline's own phases write."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from mtrl.cli import app
from mtrl.runs.phases.slot import acquire_slot
from mtrl.runs.phases.teardown import teardown
from mtrl.runs.registry import RunStatus
from tests.unit.client.conftest import LOG_GROUPS, Fake

Sleeper = Callable[[Callable[[], object]], list[int]]

runner = CliRunner()
HOLDER = "wordle-20261129T100000Z-0000000a"
WAITING = "wordle-20261129T110000Z-0000000b"


def _status(run_id: str) -> Any:
    result = runner.invoke(app, ["status", run_id, "--json"])
    assert result.exit_code in {0, 1}, result.output
    return json.loads(result.stdout)


def test_teardown_ends_the_phase_a_cancelled_run_was_in(fake: Fake) -> None:
    fake.seed_run(WAITING)  # training, its train phase open
    teardown(fake.runtime(), {"run_id": WAITING})
    fake.registry.finish(WAITING, RunStatus.ABORTED, error={"step": "Train", "error": "Aborted"})
    phases = {phase["name"]: phase for phase in _status(WAITING)["phases"]}
    assert phases["train"]["ended_at"] is not None
    assert phases["train"]["outcome"] == "stopped"
    human = runner.invoke(app, ["status", WAITING])
    assert " …" not in human.stdout  # no phase shown as still running


def test_a_poll_that_writes_after_teardown_does_not_bring_the_job_back_to_running(fake: Fake) -> None:
    fake.seed_run(WAITING, job_id="job-1", job_state="RUNNING")
    fake.registry.set_fields(WAITING, job_state="STOPPED", job_message="cancelled by teardown")  # teardown's cancel
    fake.registry.set_job_status(WAITING, "RUNNING", job_message="step 3", progress={"step": 3})  # a late poll
    fake.registry.finish(WAITING, RunStatus.ABORTED)
    view = _status(WAITING)
    assert (view["job_state"], view["progress"]) == ("STOPPED", {"step": 3})
    assert "job-1 (STOPPED)" in runner.invoke(app, ["status", WAITING]).stdout


def test_the_queue_counts_the_run_holding_the_slot(fake: Fake) -> None:
    runtime = fake.runtime()  # max_concurrent_runs 1
    for run_id in (HOLDER, WAITING):
        fake.seed_run(run_id, status=RunStatus.REGISTERED)
        fake.registry.set_status(run_id, RunStatus.WAITING_FOR_SLOT, phase="slot")
        runtime.slots.enqueue(run_id, arrival=run_id.split("-")[1])
    assert acquire_slot(runtime, {"run_id": HOLDER})["acquired"] is True
    assert acquire_slot(runtime, {"run_id": WAITING})["acquired"] is False
    assert _status(WAITING)["queue_position"] == 1
    assert "1 run(s) ahead" in runner.invoke(app, ["status", WAITING]).stdout


@pytest.mark.parametrize("columns", [60, 120])
def test_the_runs_table_fits_the_terminal_and_keeps_the_id_status_and_progress(
    fake: Fake, monkeypatch: pytest.MonkeyPatch, columns: int
) -> None:
    fake.seed_run(HOLDER, status=RunStatus.SUCCEEDED, metrics={"reward_mean": 0.4213}, cost={"usd": 1.5})
    fake.seed_run(WAITING, created_at="2026-11-29T11:00:00.000Z", progress={"step": 2, "total_steps": 5})
    # The terminal's width (what COLUMNS tells rich when the command starts; one console lives per process).
    monkeypatch.setattr("mtrl.cli.runs_cmd.console", Console(width=columns))
    result = runner.invoke(app, ["runs"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    row = next(line for line in lines if WAITING in line)
    assert "TRAINING" in row  # the status is never blanked nor cut
    assert "2/5" in row
    if columns >= 120:
        held = next(line for line in lines if HOLDER in line)
        assert "2026-11-29 10:00" in held  # created, whole
        assert "SUCCEEDED" in held
        assert "0.421" in held
        assert "$1.50" in held


def test_watch_piped_prints_each_change_as_it_happens(fake: Fake, no_sleep: Sleeper) -> None:
    # `mtrl submit --watch | cat` printed nothing until the run ended: rich's live display draws only on a terminal.
    fake.seed_run(WAITING)
    printed_while_running: list[str] = []
    steps: Iterator[Callable[[], object]] = iter(
        [
            lambda: fake.registry.set_fields(WAITING, progress={"step": 1, "total_steps": 2}),
            lambda: fake.registry.finish(WAITING, RunStatus.SUCCEEDED),
        ]
    )

    def step() -> None:
        printed_while_running.append(sys.stdout.buffer.getvalue().decode())  # type: ignore[attr-defined]
        next(steps)()

    no_sleep(step)
    result = runner.invoke(app, ["status", WAITING, "--watch"])
    assert result.exit_code == 0, result.output
    assert f"{WAITING}: TRAINING, phase train" in printed_while_running[0]
    assert f"{WAITING}: TRAINING, phase train, step 1/2" in printed_while_running[1]
    assert "SUCCEEDED" in result.stdout


def test_a_converged_run_reads_converged_not_stop(fake: Fake) -> None:
    plateau = {"verdict": "stop", "fired": [{"rule": "plateau", "level": "stop", "step": 40}]}
    fake.seed_run(HOLDER, status=RunStatus.SUCCEEDED, health=plateau, evaluation={"success": 2 / 3})
    fake.seed_run(WAITING, status=RunStatus.FAILED, health=plateau)
    shown = " ".join(runner.invoke(app, ["status", HOLDER]).stdout.split())
    assert "health converged: the reward stopped improving from step 40" in shown
    assert "plateau stop" not in shown
    assert "eval success 0.6667" in shown  # rounded, not 0.6666666666666666
    assert "health stop: plateau stop at step 40" in " ".join(runner.invoke(app, ["status", WAITING]).stdout.split())


def test_logs_are_readable_by_default_and_raw_on_request(fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.logs.create_log_stream(logGroupName=LOG_GROUPS[1], logStreamName="s")
    powertools = {
        "level": "INFO",
        "location": "handler:40",
        "message": "job status",
        "timestamp": "2026-11-29 10:00:00,000+0000",
        "service": "backend",
        "run_id": WAITING,
        "job_state": "RUNNING",
        "reward_mean": 0.123456789,
    }
    base = int(time.time() * 1000) - 60_000
    fake.logs.put_log_events(
        logGroupName=LOG_GROUPS[1],
        logStreamName="s",
        logEvents=[{"timestamp": base, "message": json.dumps(powertools)}],
    )
    shown = runner.invoke(app, ["logs", WAITING]).stdout
    assert "INFO job status (job_state=RUNNING, reward_mean=0.1235)" in shown
    assert '"location"' not in shown
    monkeypatch.setenv("MTRL_LOG_FORMAT", "json")
    assert '"location": "handler:40"' in runner.invoke(app, ["logs", WAITING]).stdout
