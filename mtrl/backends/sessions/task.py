"""The sessions loop's Fargate task: ``python -m mtrl.backends.sessions.task --run-config s3://…/run-config.json``.

It reads the run config, then advances the run (``runner.SessionsRunner``) until it is done, failed or stopped,
resuming in-process from the last saved step after a failure of the service's infrastructure. A task started again
after a restart resumes the same way from the progress in S3. SIGTERM (ECS StopTask: a cancel, a cleanup) ends the
step in progress and closes the service before the task exits (the container's stop timeout must leave time for a
SageMaker session to be stopped).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any

import boto3

from mtrl.backends._aws import S3Uri
from mtrl.backends.sessions.runner import OpenService, RunConfig, SessionsRunner, open_service

logger = logging.getLogger("mtrl.backends.sessions.task")

EXIT_STOPPED = 143  # 128 + SIGTERM, as a shell reports a process ended by it


class TaskStopped(BaseException):
    """SIGTERM: unwinds through the loop (not an ``Exception``, so no step handler takes it) to close the service."""


def stop(signum: int, frame: FrameType | None) -> None:
    raise TaskStopped(f"signal {signum}")


def read_run_config(s3: Any, uri: str) -> RunConfig:
    location = S3Uri.parse(uri)
    body = s3.get_object(Bucket=location.bucket, Key=location.key)["Body"].read()
    return RunConfig.model_validate_json(body)


def run(uri: str, *, s3: Any = None, open: OpenService = open_service, max_seconds: float | None = None) -> int:
    """Advance the run at ``uri`` to its end, or until ``max_seconds`` have passed (a step under way finishes; the
    next call resumes after it); the exit status: 0 done or paused, 1 failed or stopped by request."""
    client = s3 or boto3.client("s3")
    config = read_run_config(client, uri)
    runner = SessionsRunner(config, client, open=open)
    started = time.monotonic()
    left = max_seconds
    while True:
        # Every call advances at least once (a step under way finishes), however little time it was given: a limit
        # spent before the first step would otherwise leave the run where it was, poll after poll.
        progress = runner.advance(max_seconds=left)
        logger.info("run %s: %s at step %d (%s)", config.run_id, progress.phase, progress.step, progress.message)
        if progress.finished:
            return 0 if progress.phase == "done" else 1
        left = None if max_seconds is None else max_seconds - (time.monotonic() - started)
        if left is not None and left <= 0:
            return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mtrl.backends.sessions.task", description=__doc__)
    parser.add_argument("--run-config", required=True, help="s3:// URI of the run's run-config.json")
    parser.add_argument(
        "--max-seconds", type=float, default=None, help="start no step after this many seconds (default: to the end)"
    )
    arguments = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, stop)
    try:
        return run(arguments.run_config, max_seconds=arguments.max_seconds)
    except TaskStopped:
        logger.warning("stopped by SIGTERM; the service is closed and the run resumes from its last saved step")
        return EXIT_STOPPED


if __name__ == "__main__":
    sys.exit(main())
