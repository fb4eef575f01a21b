"""What the sessions runner, adapter and task tests share: a run on moto S3 (its dataset, config and context) and a
service that records what the runner asked of it and fails where told."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import boto3

from mtrl.backends.sessions.options import SessionsRunOptions
from mtrl.backends.sessions.runner import Progress, RunConfig, open_service
from mtrl.backends.sessions.settings import SessionsSettings
from mtrl.contracts.backend import CreatedResource, RunContext

REGION = "us-east-1"
BUCKET = "mtrl-sessions-test"
RUN_ID = "run-sessions-1"
OUTPUT = f"s3://{BUCKET}/runs/{RUN_ID}/"
TRAIN_KEY = "training-data/wordle.jsonl"
EVAL_KEY = "eval-data/wordle.jsonl"
LOCAL_OPTIONS: dict[str, Any] = {
    "service": "local",
    "base_model": "tiny",
    "steps": 2,
    "group_size": 2,
    "tasks_per_step": 1,
    "max_tokens": 2,
}


def wordle_rows(count: int, *, start: int = 0) -> list[dict[str, Any]]:
    words = ["crane", "slate", "pious", "mango"]
    return [
        {"id": f"w-{i}", "metadata": {"prompt": f"Game {i}: guess", "answer": words[i % len(words)]}}
        for i in range(start, start + count)
    ]


def world(*, eval_rows: int = 0) -> Any:
    """The bucket with a training set (and a held-out set): call inside moto."""
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key=TRAIN_KEY, Body="".join(json.dumps(row) + "\n" for row in wordle_rows(4)))
    if eval_rows:
        body = "".join(json.dumps(row) + "\n" for row in wordle_rows(eval_rows, start=100))
        s3.put_object(Bucket=BUCKET, Key=EVAL_KEY, Body=body)
    return s3


def settings(**overrides: Any) -> dict[str, Any]:
    """A run's effective settings as the adapter receives them (deploy ∪ run ∪ options)."""
    return {
        "region": REGION,
        "data_bucket": BUCKET,
        "environment": "wordle",
        "environment_args": {},
        "run_id": RUN_ID,
        "dataset_version_id": None,
        **LOCAL_OPTIONS,
        **overrides,
    }


@dataclass
class Recorded:
    resources: list[CreatedResource] = field(default_factory=list)


def context(recorded: Recorded | None = None, *, with_eval: bool = False, **overrides: Any) -> RunContext:
    log = recorded or Recorded()
    return RunContext(
        run_id=RUN_ID,
        settings=settings(**overrides),
        dataset_uri=f"s3://{BUCKET}/{TRAIN_KEY}",
        eval_dataset_uri=f"s3://{BUCKET}/{EVAL_KEY}" if with_eval else None,
        output_uri=OUTPUT,
        resources=tuple(log.resources),
        record_resource=log.resources.append,
    )


def config(*, with_eval: bool = False, **options: Any) -> RunConfig:
    return RunConfig(
        run_id=RUN_ID,
        output_uri=OUTPUT,
        dataset_uri=f"s3://{BUCKET}/{TRAIN_KEY}",
        eval_dataset_uri=f"s3://{BUCKET}/{EVAL_KEY}" if with_eval else None,
        environment="wordle",
        options=SessionsRunOptions.model_validate({**LOCAL_OPTIONS, **options}),
        deploy=SessionsSettings(region=REGION, data_bucket=BUCKET),
    )


class Stop(BaseException):
    """A kill between two calls (what SIGTERM raises in the task)."""


@dataclass
class Opener:
    """Opens the real local service on the tiny model, wrapped: records each service's calls, and raises ``fail`` at
    the ``at``-th call of ``method`` (counted over every service it opened)."""

    fail: BaseException | None = None
    method: str = "forward_backward"
    at: int = 1
    services: list[RecordingService] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=dict)

    def __call__(self, config: RunConfig, progress: Progress) -> RecordingService:
        service = RecordingService(open_service(config, progress), self)
        self.services.append(service)
        return service


class RecordingService:
    def __init__(self, inner: Any, opener: Opener) -> None:
        self._inner = inner
        self._opener = opener
        self.loaded: list[str] = []
        self.closed = False

    def _counted(self, method: str) -> None:
        opener = self._opener
        opener.calls[method] = opener.calls.get(method, 0) + 1
        if opener.fail is not None and method == opener.method and opener.calls[method] == opener.at:
            raise opener.fail

    def sample(self, *arguments: Any) -> Any:
        self._counted("sample")
        return self._inner.sample(*arguments)

    def forward_backward(self, *arguments: Any) -> Any:
        self._counted("forward_backward")
        return self._inner.forward_backward(*arguments)

    def load_state(self, reference: str) -> None:
        self.loaded.append(reference)
        self._inner.load_state(reference)

    def close(self) -> None:
        self.closed = True
        self._inner.close()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        attribute: Callable[..., Any] = getattr(self._inner, name)
        return attribute
