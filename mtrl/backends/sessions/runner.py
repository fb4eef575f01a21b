"""One sessions run, step by step, wherever its loop runs (a Fargate task, ``task``; or the status polls, ``adapter``).

Everything the run needs is in its **run config** (``runs/<run id>/sessions/run-config.json``, written at Submit);
everything it has done is in its **progress** (``runs/<run id>/sessions/progress.json``), written after each unit
of work and read before the next. ``SessionsRunner.advance`` opens the training service, restores the last saved
state, evaluates the untrained policy on the held-out rows (once), runs steps (``loop.run_step``), and after each
step saves the service's state (``runs/<run id>/sessions/state/step-<n>/`` for the local service, whose state is
files; a SageMaker state is the model package the service saved, kept by reference), then the progress (the commit
point: a step counts once its progress is written), then ``runs/<run id>/signals.jsonl`` rendered from the
progress. After the last step it evaluates the trained policy and marks the run done. It closes the service on
every path (a SageMaker session is stopped and deleted).

A restart (a new task, the next poll) resumes from the progress: the step after the last one written, the service
state saved with it, the same task draw (``loop.tasks_for_step`` is seeded per step). Work after the last written
step is redone. A SageMaker session's name is written to the progress before the session is created, so the
adapter's cleanup can stop any session a killed task left behind.

Each step's signal row comes from the one row builder (``mtrl.health.rows.episode_row``) with the sessions figures
in the row's extras: ``sampler_kl`` (the sampler/trainer mismatch), ``infra_failed`` (episodes the infrastructure
failed, kept out of the figures), ``loss`` and ``trained_episodes``.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, Field

from mtrl.backends._aws import S3Uri, error_code
from mtrl.backends.sessions.loop import Evaluation, LoopSettings, StepReport, Task, evaluate, run_step, tasks_for_step
from mtrl.backends.sessions.options import TINY_MODEL, SessionsRunOptions
from mtrl.backends.sessions.sagemaker_wire import SageMakerSessionConfig, session_name
from mtrl.backends.sessions.service import AdamParams, ServiceError, TokenUsage, TrainingService
from mtrl.backends.sessions.settings import SessionsSettings
from mtrl.envs.registry import EnvironmentSpec, load_spec
from mtrl.health.rows import episode_row
from mtrl.health.signals import SIGNALS_FILE, SignalHeader, iso_time, render_signals, row_from
from mtrl.validation.rows import iter_rows, task_key

logger = logging.getLogger(__name__)

FOLDER = "sessions/"
RUN_CONFIG = "run-config.json"
PROGRESS = "progress.json"
CANCEL = "cancel.json"
STATE_FOLDER = "state/"
MAX_DATASET_BYTES = 50 * 1024 * 1024
# Infrastructure failures of the service in a row (each resumed from the last saved state) before the run fails.
MAX_SERVICE_FAILURES = 3

Phase = Literal["training", "done", "failed", "stopped"]


class RunConfig(BaseModel):
    """What a sessions run trains, on what, and where it writes: fixed at Submit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str = Field(min_length=1)
    output_uri: str = Field(pattern=r"^s3://.+/$")
    dataset_uri: str = Field(pattern=r"^s3://")
    dataset_version_id: str | None = None  # the validated version of the uploaded dataset
    eval_dataset_uri: str | None = None
    environment: str = Field(min_length=1)
    environment_args: dict[str, Any] = {}
    options: SessionsRunOptions
    deploy: SessionsSettings

    @property
    def folder(self) -> S3Uri:
        return S3Uri.parse(self.output_uri).join(FOLDER)

    @property
    def uri(self) -> str:
        return str(self.folder.join(RUN_CONFIG))


class SavedState(BaseModel):
    """The service state saved after ``step``: files under ``uri`` (local), or the service's own reference."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    step: int
    uri: str | None = None
    reference: str | None = None


class Progress(BaseModel):
    """What a run has done. ``usage``: tokens billed over every session so far; ``rows``: the signal rows of the
    steps written; ``before``/``after``: the held-out evaluation figures; ``sessions``: SageMaker sessions opened
    (named before they are created); ``service_failures``: infrastructure failures since the last step written."""

    model_config = ConfigDict(extra="forbid")

    service: Literal["sagemaker", "local"]
    total_steps: int
    step: int = 0
    phase: Phase = "training"
    message: str = ""
    usage: dict[str, int] = Field(default_factory=lambda: {"prefill": 0, "sample": 0, "train": 0})
    state: SavedState | None = None
    rows: list[dict[str, Any]] = []
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    last: dict[str, Any] = {}
    sessions: list[str] = []
    service_failures: int = 0
    infra_failed: int = 0

    @property
    def finished(self) -> bool:
        return self.phase != "training"


OpenService = Callable[[RunConfig, Progress], TrainingService]


class RunStore:
    """The run's objects under ``runs/<run id>/``."""

    def __init__(self, s3: Any, output_uri: str) -> None:
        self.s3 = s3
        self.root = S3Uri.parse(output_uri)
        self.folder = self.root.join(FOLDER)

    def read(self, uri: S3Uri, version_id: str | None = None) -> bytes | None:
        extra = {"VersionId": version_id} if version_id else {}
        try:
            body: bytes = self.s3.get_object(Bucket=uri.bucket, Key=uri.key, **extra)["Body"].read()
        except ClientError as error:
            if error_code(error) in {"NoSuchKey", "404", "NotFound"}:
                return None
            raise
        return body

    def write(self, uri: S3Uri, body: bytes, content_type: str = "application/json") -> None:
        self.s3.put_object(Bucket=uri.bucket, Key=uri.key, Body=body, ContentType=content_type)

    def progress(self) -> Progress | None:
        body = self.read(self.folder.join(PROGRESS))
        return None if body is None else Progress.model_validate_json(body)

    def save_progress(self, progress: Progress) -> None:
        document = json.dumps(progress.model_dump(mode="json"), allow_nan=False).encode()
        self.write(self.folder.join(PROGRESS), document)

    def cancel_requested(self) -> bool:
        return self.read(self.folder.join(CANCEL)) is not None

    def request_cancel(self) -> None:
        self.write(self.folder.join(CANCEL), b"{}")

    def run_config(self) -> RunConfig:
        body = self.read(self.folder.join(RUN_CONFIG))
        if body is None:
            raise FileNotFoundError(f"no run config at {self.folder.join(RUN_CONFIG)} (the run was never submitted)")
        return RunConfig.model_validate_json(body)

    def write_signals(self, progress: Progress, group_size: int) -> None:
        header = SignalHeader(planned_steps=progress.total_steps, group_size=group_size)
        text = render_signals(header, [row_from(row) for row in progress.rows])
        self.write(self.root.join(SIGNALS_FILE), text.encode(), content_type="application/x-ndjson")

    def upload_directory(self, directory: Path, prefix: S3Uri) -> None:
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                self.write(
                    prefix.join(path.relative_to(directory).as_posix()), path.read_bytes(), "binary/octet-stream"
                )

    def download_prefix(self, prefix: S3Uri, directory: Path) -> None:
        paginator = self.s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=prefix.bucket, Prefix=prefix.key):
            for item in page.get("Contents", []):
                target = directory / item["Key"][len(prefix.key) :]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(self.s3.get_object(Bucket=prefix.bucket, Key=item["Key"])["Body"].read())


def loop_settings(config: RunConfig) -> LoopSettings:
    options = config.options
    return LoopSettings(
        steps=options.steps,
        tasks_per_step=options.tasks_per_step,
        group_size=options.group_size,
        max_tokens=options.max_tokens,
        temperature=options.temperature,
        loss=options.loss,
        adam=AdamParams(learning_rate=options.learning_rate),
        seed=options.seed,
        env_args=dict(config.environment_args),
    )


def open_service(config: RunConfig, progress: Progress) -> TrainingService:
    """The run's training service: a SageMaker session (named in ``progress.sessions`` by the caller first), or
    the local twin on ``tiny`` or a model directory."""
    options = config.options
    if options.service == "local":
        from mtrl.backends.sessions.local_service import LocalTrainingService, LoraSettings  # noqa: PLC0415

        lora = LoraSettings(rank=options.lora_rank)
        if options.model == TINY_MODEL:
            return LocalTrainingService.tiny(seed=options.seed, lora=lora)
        return LocalTrainingService.from_pretrained(options.model, seed=options.seed, lora=lora)
    return _open_sagemaker(config, progress.sessions[-1])


def _open_sagemaker(config: RunConfig, name: str) -> TrainingService:
    import boto3  # noqa: PLC0415

    from mtrl.backends.sessions.chat_tokenizer import HFChatTokenizer  # noqa: PLC0415
    from mtrl.backends.sessions.sagemaker_service import SageMakerTrainingService, session_clients  # noqa: PLC0415

    deploy, options = config.deploy, config.options
    tokenizer_id = str(options.tokenizer)

    def tokenizer() -> HFChatTokenizer:
        from transformers import AutoTokenizer  # noqa: PLC0415

        return HFChatTokenizer(AutoTokenizer.from_pretrained(tokenizer_id))

    control, runtime = session_clients(boto3.Session(), deploy.region)
    return SageMakerTrainingService.open(
        session_config(config, name), control=control, runtime=runtime, tokenizer_factory=tokenizer
    )


def session_config(config: RunConfig, name: str) -> SageMakerSessionConfig:
    """The ``SageMakerSessionConfig`` of the run's session ``name``."""
    deploy = config.deploy
    return SageMakerSessionConfig(
        session_name=name,
        region=deploy.region,
        base_model_arn=str(config.options.base_model),
        role_arn=str(deploy.sessions_role_arn),
        output_s3_uri=str(config.folder.join("checkpoints/")),
        model_package_group_arn=str(deploy.sessions_model_package_group_arn),
        lora_rank=config.options.lora_rank,
        lora_alpha=2 * config.options.lora_rank,
        kms_key_arn=deploy.kms_key_arn,
        subnet_ids=tuple(deploy.sessions_subnet_ids),
        security_group_ids=tuple(deploy.sessions_security_group_ids),
        tags={"mtrl:run-id": config.run_id},
    )


class SessionsRunner:
    """Advances one run from its progress (see the module docstring). ``open``: how the service is built."""

    def __init__(
        self, config: RunConfig, s3: Any, *, open: OpenService = open_service, clock: Callable[[], float] = time.time
    ) -> None:
        self.config = config
        self.store = RunStore(s3, config.output_uri)
        self.settings = loop_settings(config)
        self._open = open
        self._clock = clock
        self._seen = TokenUsage()

    def progress(self) -> Progress:
        found = self.store.progress()
        return found or Progress(service=self.config.options.service, total_steps=self.config.options.steps)

    def advance(self, max_steps: int | None = None, *, max_seconds: float | None = None) -> Progress:
        """Run up to ``max_steps`` more steps (None: to the end), with the evaluations due, starting no step once
        ``max_seconds`` have passed (None: no limit; the step under way finishes); returns the progress as
        written. A failure of the service's infrastructure leaves the run to be resumed (up to
        ``MAX_SERVICE_FAILURES`` in a row); any other failure ends it ``failed``. Never leaves the service open."""
        progress = self.progress()
        if progress.finished:
            return progress
        if self.store.cancel_requested():
            return self._save(progress.model_copy(update={"phase": "stopped", "message": "cancelled"}))
        spec = load_spec(self.config.environment)
        tasks = self._tasks(self.config.dataset_uri, self.config.dataset_version_id)
        eval_tasks = self._tasks(self.config.eval_dataset_uri, None) if self.config.eval_dataset_uri else {}
        if progress.service == "sagemaker":  # named before it exists: cleanup finds a session a killed task left
            name = session_name(self.config.run_id, len(progress.sessions) + 1)
            progress = self._save(progress.model_copy(update={"sessions": [*progress.sessions, name]}))
        self._seen = TokenUsage()
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        try:
            service = self._open(self.config, progress)
        except ServiceError as error:  # a session that never came up (the service tore down what it had made)
            return self._failed(None, progress, error, resumable=error.infrastructure)
        try:
            progress = self._advance(service, spec, tasks, eval_tasks, progress, max_steps=max_steps, deadline=deadline)
        except ServiceError as error:
            progress = self._failed(service, progress, error, resumable=error.infrastructure)
        except Exception as error:  # an environment plug-in or the model raised: the run fails, in plain words
            progress = self._failed(service, progress, error, resumable=False)
        finally:
            service.close()
        return progress

    def _advance(
        self,
        service: TrainingService,
        spec: EnvironmentSpec,
        tasks: Mapping[str, Task],
        eval_tasks: Mapping[str, Task],
        progress: Progress,
        *,
        max_steps: int | None,
        deadline: float | None,
    ) -> Progress:
        self._restore(service, progress)
        if eval_tasks and progress.before is None:
            before = evaluate(service, spec, eval_tasks, self.settings, step=progress.step)
            progress = self._save(self._counted(service, progress, before=_figures(before)))
        ran = 0
        while progress.step < progress.total_steps and (max_steps is None or ran < max_steps):
            if deadline is not None and ran and time.monotonic() >= deadline:
                return progress  # the next call resumes from the step just written
            if self.store.cancel_requested():
                return self._save(progress.model_copy(update={"phase": "stopped", "message": "cancelled"}))
            step = progress.step + 1
            report = run_step(service, spec, tasks_for_step(tasks, self.settings, step), self.settings, step)
            state = self._keep_state(service, step)
            progress = self._save(self._stepped(service, progress, report, state))
            ran += 1
        if progress.step < progress.total_steps:
            return progress
        after = evaluate(service, spec, eval_tasks, self.settings, step=progress.step) if eval_tasks else None
        update = {"after": _figures(after) if after else None, "phase": "done", "message": "training complete"}
        return self._save(self._counted(service, progress, **update))

    def _stepped(self, service: TrainingService, progress: Progress, report: StepReport, state: SavedState) -> Progress:
        extra = {
            "sampler_kl": _finite(report.sampler_kl),
            "infra_failed": report.infra_failed,
            "loss": _finite(report.loss),
            "trained_episodes": report.trained_episodes,
        }
        row = replace(episode_row(report.step, report.scored_groups(), time=iso_time(self._clock())), extra=extra)
        last = {"reward_mean": _finite(report.fields.get("reward_mean")), **extra}
        return self._counted(
            service,
            progress,
            step=report.step,
            state=state,
            rows=[*progress.rows, row.to_dict()],
            last=last,
            infra_failed=progress.infra_failed + report.infra_failed,
            service_failures=0,
            message=f"step {report.step}/{progress.total_steps}",
        )

    def _counted(self, service: TrainingService, progress: Progress, **update: Any) -> Progress:
        """``progress`` with ``update`` and the tokens billed since the last count."""
        now = service.usage()
        seen, self._seen = self._seen, now
        usage = {
            "prefill": progress.usage["prefill"] + now.prefill - seen.prefill,
            "sample": progress.usage["sample"] + now.sample - seen.sample,
            "train": progress.usage["train"] + now.train - seen.train,
        }
        return progress.model_copy(update={**update, "usage": usage})

    def _save(self, progress: Progress) -> Progress:
        self.store.save_progress(progress)  # the commit point
        if progress.rows or progress.step == 0:
            self.store.write_signals(progress, self.settings.group_size)
        return progress

    def _failed(
        self, service: TrainingService | None, progress: Progress, error: BaseException, *, resumable: bool
    ) -> Progress:
        try:
            progress = self._counted(service, progress) if service is not None else progress
        except ServiceError:
            logger.warning("could not read the service's usage after a failure", exc_info=True)
        failures = progress.service_failures + 1 if resumable else progress.service_failures
        message = f"{type(error).__name__}: {error}"
        if resumable and failures < MAX_SERVICE_FAILURES:
            logger.warning("step %d failed (%s); resuming from the last saved state", progress.step + 1, message)
            return self._save(progress.model_copy(update={"service_failures": failures, "message": message}))
        if resumable:
            message = f"{message} ({failures} infrastructure failures in a row)"
        return self._save(progress.model_copy(update={"phase": "failed", "message": message}))

    # -- the service's state -------------------------------------------------------------------------------------

    def _keep_state(self, service: TrainingService, step: int) -> SavedState:
        reference = service.save_state(f"step-{step}")
        if self.config.options.service == "sagemaker":
            return SavedState(step=step, reference=reference)
        prefix = self.store.folder.join(STATE_FOLDER, f"step-{step}/")
        self.store.upload_directory(Path(reference), prefix)
        return SavedState(step=step, uri=str(prefix))

    def _restore(self, service: TrainingService, progress: Progress) -> None:
        saved = progress.state
        if saved is None:
            return
        if saved.reference is not None:
            service.load_state(saved.reference)
        else:
            directory = Path(tempfile.mkdtemp(prefix="mtrl-sessions-state-"))
            try:
                self.store.download_prefix(S3Uri.parse(str(saved.uri)), directory)
                service.load_state(str(directory))
            finally:
                shutil.rmtree(directory, ignore_errors=True)
        service.save_weights_for_sampler(f"step-{saved.step}")  # the sampler serves the restored weights

    # -- the data ------------------------------------------------------------------------------------------------

    def _tasks(self, uri_text: str | None, version_id: str | None) -> dict[str, Task]:
        """Rows' ``metadata`` by row id (by task key where a row has none). ``version_id``: the validated version of
        the uploaded dataset; a split file Validate wrote under the run's own prefix is read as it is."""
        uri = S3Uri.parse(str(uri_text))
        if uri.key.startswith(self.store.root.key):
            version_id = None
        head = self.store.s3.head_object(
            Bucket=uri.bucket, Key=uri.key, **({"VersionId": version_id} if version_id else {})
        )
        if int(head.get("ContentLength", 0)) > MAX_DATASET_BYTES:
            raise ValueError(f"{uri} is larger than {MAX_DATASET_BYTES // 2**20} MiB")
        body = self.store.read(uri, version_id)
        if body is None:
            raise FileNotFoundError(f"no dataset at {uri}")
        tasks: dict[str, Task] = {}
        for number, row in iter_rows(body):
            metadata = row.get("metadata")
            if not isinstance(metadata, dict):
                raise ValueError(f"{uri} line {number}: expected an object with a 'metadata' object")
            tasks[str(row.get("id") or task_key(metadata))] = metadata
        if not tasks:
            raise ValueError(f"{uri} holds no rows")
        return tasks


def _figures(evaluation: Evaluation) -> dict[str, Any]:
    return {
        "step": evaluation.step,
        "tasks": len(evaluation.episodes),
        "reward_mean": _finite(evaluation.reward_mean),
        "success_share": _finite(evaluation.success_share),
        "evaluation_mean": _finite(evaluation.fields.get("evaluation_mean")),
        "infra_failed": evaluation.infra_failed,
    }


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)
