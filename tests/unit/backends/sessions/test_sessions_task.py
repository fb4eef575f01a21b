"""The loop's Fargate task entry point on moto S3 with the tiny model: it reads the run config and runs the run to
its end; a SIGTERM while a step runs closes the service and leaves the run to resume from its last saved step."""

from __future__ import annotations

import os
import signal
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


def test_main_exits_143_when_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    def stopped(uri: str) -> int:
        raise task.TaskStopped("signal 15")

    monkeypatch.setattr(task, "run", stopped)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert task.main(["--run-config", "s3://bucket/runs/r/sessions/run-config.json"]) == task.EXIT_STOPPED
        assert signal.getsignal(signal.SIGTERM) is task.stop
    finally:
        signal.signal(signal.SIGTERM, previous)
