"""The loop's Fargate task entry point on moto S3 with the tiny model: it reads the run config and runs the run to
its end; a SIGTERM while a step runs closes the service and leaves the run to resume from its last saved step."""

from __future__ import annotations

import itertools
import os
import signal
from types import SimpleNamespace
from typing import Any

import pytest
from run_support import Opener, config, world

pytest.importorskip("torch", reason="the mtrl[llm] extra (make test installs it)")
pytestmark = [
    pytest.mark.usefixtures("mocked_aws"),
    pytest.mark.filterwarnings(
        "ignore:Model has `tie_word_embeddings=True`:UserWarning", "ignore:Setting `save_embedding_layers`:UserWarning"
    ),
]

from mtrl.backends.sessions import task  # noqa: E402
from mtrl.backends.sessions.runner import RunStore  # noqa: E402


def _submitted(s3: Any, **options: Any) -> str:
    """What Submit writes: the run config and the initial progress."""
    run = config(**options)
    store = RunStore(s3, run.output_uri)
    store.write(run.folder.join("run-config.json"), run.model_dump_json().encode())
    store.save_progress(task.SessionsRunner(run, s3).progress())
    return run.uri


def test_the_task_runs_the_run_to_its_end() -> None:
    s3 = world()
    uri = _submitted(s3, steps=1)
    assert task.run(uri, s3=s3) == 0
    progress = RunStore(s3, config().output_uri).progress()
    assert progress is not None
    assert (progress.step, progress.phase) == (1, "done")


class TerminatedMidStep(Opener):
    """Opens the tiny service; its first sampling call gets the SIGTERM ECS StopTask delivers."""

    def __call__(self, *arguments: Any) -> Any:
        service = super().__call__(*arguments)
        service.sample = self.terminated
        return service

    @staticmethod
    def terminated(*_: Any) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not stop the step")


def test_sigterm_closes_the_service_and_the_run_resumes_later() -> None:
    s3 = world()
    uri = _submitted(s3)
    opener = TerminatedMidStep()
    previous = signal.signal(signal.SIGTERM, task.stop)
    try:
        with pytest.raises(task.TaskStopped):
            task.run(uri, s3=s3, open=opener)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert opener.services[0].closed
    progress = RunStore(s3, config().output_uri).progress()
    assert progress is not None
    assert (progress.step, progress.phase) == (0, "training")
    assert task.run(uri, s3=s3, open=Opener()) == 0  # a new task resumes and finishes the run


def test_a_time_limited_task_ends_after_the_step_that_spent_its_time_and_the_next_resumes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # How a status poll runs the loop in another interpreter (mtrl.backends.sessions.adapter, DELEGATED_SECONDS): the
    # step under way finishes, its state and progress are written, and the next call resumes after it. The task's
    # clock moves a second per reading, so its limit is spent before the first step: it still makes one.
    s3 = world()
    uri = _submitted(s3, steps=2)
    limited = Opener()
    readings = itertools.count()
    monkeypatch.setattr(task, "time", SimpleNamespace(monotonic=lambda: float(next(readings))))
    assert task.run(uri, s3=s3, open=limited, max_seconds=1e-6) == 0
    progress = RunStore(s3, config().output_uri).progress()
    assert progress is not None
    assert (progress.step, progress.phase) == (1, "training")
    assert limited.services[0].closed
    resumed = Opener()
    assert task.run(uri, s3=s3, open=resumed) == 0
    progress = RunStore(s3, config().output_uri).progress()
    assert progress is not None
    assert (progress.step, progress.phase) == (2, "done")
    assert len(resumed.services[0].loaded) == 1  # from the state saved after step 1


def test_main_passes_the_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []

    def recorded(uri: str, *, max_seconds: float | None = None) -> int:
        seen.append((uri, max_seconds))
        return 0

    monkeypatch.setattr(task, "run", recorded)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert task.main(["--run-config", "s3://bucket/r.json", "--max-seconds", "90"]) == 0
        assert task.main(["--run-config", "s3://bucket/r.json"]) == 0
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert seen == [("s3://bucket/r.json", 90.0), ("s3://bucket/r.json", None)]


def test_main_exits_143_when_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    def stopped(uri: str, **_: Any) -> int:
        raise task.TaskStopped("signal 15")

    monkeypatch.setattr(task, "run", stopped)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert task.main(["--run-config", "s3://bucket/runs/r/sessions/run-config.json"]) == task.EXIT_STOPPED
        assert signal.getsignal(signal.SIGTERM) is task.stop
    finally:
        signal.signal(signal.SIGTERM, previous)
