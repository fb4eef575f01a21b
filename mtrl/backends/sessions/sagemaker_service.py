"""The ``TrainingService`` on SageMaker training sessions: create a session, wait until it runs, drive it through the
session runtime, read what it bills, and stop and delete it on every path.

Both APIs are called through boto3 clients (``sagemaker`` and ``sagemakertrainingsessionruntime``), so botocore
validates every request against the service model before it leaves. Neither client retries on its own: throttling,
5xx and connection errors are retried here, with bounded, jittered backoff, and everything else becomes a
``ServiceError`` (``infrastructure=False`` only for a request that is mtrl's own fault: one that does not fit the
service model, or that the service rejects as invalid).

Where each fact comes from:
- botocore 1.44.8 service models [verified, read]: the control-plane operations (Create/Describe/List/Stop/
  DeleteTrainingSession in ``sagemaker`` 2017-07-24); session statuses Created, Scheduled, Running, Blocked, Failed,
  Stopping, Stopped, Expired, Deleting, DeletionFailed; ``BillableTokenUsage`` (Prefill/Sample/TrainingTokenCount);
  LoRA rank 1..256; the runtime (2025-02-10, rest-json): ExecuteTrainingOperation / GetTrainingOperationResult,
  ExecuteSamplingOperation / GetSamplingOperationResult, operation statuses Pending, InProgress, Completed, Failed,
  Skipped; losses cross_entropy, importance_sampling, ppo, cispo; ``maxTokens`` >= 512; sequence numbers >= 1,
  executed strictly in order ("if a gap exists, the session blocks").
- ``sagemaker-train`` 1.27.0 source [verified, read; its request bodies are recorded in the tests and compared]:
  sampling goes through ExecuteSamplingOperation (``sample``) and polling, not SampleTrainingSession; sequence
  numbers start at 1 per session and a failed submit keeps its number; a submit is retried with the same
  ``clientToken``; saved weights are pointed at with ``loadWeightsForSampling`` before sampling from them; the service
  deletes only Stopped, Failed or DeletionFailed sessions; a stop of an already-stopping session is answered with a
  ValidationException; an RL loss needs ``target_tokens``, ``weights``, ``logprobs`` and ``advantages`` per token.
- Unverified (no source found): whether an Expired session can be deleted (tried, and a refusal only logged); the
  metric name the forward-backward loss comes under, and whether the per-datum loss outputs carry the trainer's
  ``logprobs`` (Tinker's name; absent, the mismatch figure has nothing to compare); the regions and base models that
  offer training sessions (the library's quickstart uses us-west-2 [docs]); per-token prices (none published where
  we looked: ``mtrl cost`` must say so).
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

from mtrl.backends._aws import error_code, error_message, is_transient
from mtrl.backends.sessions import sagemaker_wire as wire
from mtrl.backends.sessions.sagemaker_wire import SageMakerSessionConfig
from mtrl.backends.sessions.service import (
    AdamParams,
    ChatTokenizer,
    Datum,
    ForwardBackwardResult,
    LossName,
    SampledSequence,
    SamplingParams,
    ServiceError,
    TokenUsage,
)

logger = logging.getLogger(__name__)

RUNTIME_SERVICE = "sagemakertrainingsessionruntime"
_COMING_UP = frozenset({"Created", "Scheduled"})
# A session in one of these can no longer run operations: an operation that failed is explained by it.
_ENDED = frozenset({"Failed", "Expired", "Stopping", "Stopped", "Deleting", "DeletionFailed"})
_NOTHING_TO_STOP = _ENDED
_DELETABLE = frozenset({"Stopped", "Failed", "DeletionFailed", "Expired"})
_NOT_FOUND = frozenset({"ResourceNotFound", "ResourceNotFoundException"})
_INVALID_REQUEST = frozenset({"ValidationException", "ValidationError"})
_OPERATION_FAILED = frozenset({"Failed", "Skipped"})


@dataclass(frozen=True)
class Pacing:
    """How long to wait and how often to ask. ``chunk_*``: the most datums / values one forward-backward request
    carries (the library's bounds: 1024 datums, about 10 MB)."""

    session_poll_s: float = 10.0
    session_ready_timeout_s: float = 1800.0
    operation_poll_s: float = 1.0
    operation_timeout_s: float = 3600.0
    teardown_timeout_s: float = 600.0
    retry_attempts: int = 8
    backoff_base_s: float = 0.5
    backoff_max_s: float = 8.0
    chunk_max_datums: int = 1024
    chunk_max_values: int = 1_000_000


def session_clients(session: boto3.Session, region: str, *, runtime_endpoint_url: str | None = None) -> tuple[Any, Any]:
    """The control-plane and runtime clients, with botocore's own retries off (this module retries, once)."""
    config = Config(retries={"total_max_attempts": 1}, connect_timeout=10, read_timeout=60, max_pool_connections=64)
    control = session.client("sagemaker", region_name=region, config=config)
    runtime = session.client(RUNTIME_SERVICE, region_name=region, config=config, endpoint_url=runtime_endpoint_url)
    return control, runtime


class SageMakerTrainingService:
    """One LoRA training session. Open it with ``open`` (creates it and waits until it runs); ``close`` (or leaving
    a ``with`` block) stops and deletes it, and may be called from another thread to cancel what is running."""

    def __init__(
        self,
        config: SageMakerSessionConfig,
        *,
        control: Any,
        runtime: Any,
        tokenizer_factory: Callable[[], ChatTokenizer],
        pacing: Pacing = Pacing(),
    ) -> None:
        self.config = config
        self._control = control
        self._runtime = runtime
        self._tokenizer_factory = tokenizer_factory
        self._tokenizer: ChatTokenizer | None = None
        self._pacing = pacing
        self._lock = threading.Lock()
        # Held across a batch's submits so its chunks get consecutive sequence numbers.
        self._sequence_lock = threading.RLock()
        self._sequence = 0
        self._sampler_weights: str | None = None
        self._usage = TokenUsage()
        self._closing = threading.Event()
        self._closed = False

    @classmethod
    def open(
        cls,
        config: SageMakerSessionConfig,
        *,
        control: Any,
        runtime: Any,
        tokenizer_factory: Callable[[], ChatTokenizer],
        pacing: Pacing = Pacing(),
    ) -> SageMakerTrainingService:
        service = cls(config, control=control, runtime=runtime, tokenizer_factory=tokenizer_factory, pacing=pacing)
        try:
            service._call(
                "CreateTrainingSession", control.create_training_session, **wire.create_session_request(config)
            )
            service._wait_until_running()
        except BaseException:
            # A create whose answer was lost may still have made the session: tear down whatever exists.
            try:
                service.close()
            except ServiceError:
                logger.warning("could not tear down training session %s", config.session_name, exc_info=True)
            raise
        return service

    @property
    def name(self) -> str:
        return self.config.session_name

    @property
    def tokenizer(self) -> ChatTokenizer:
        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = self._tokenizer_factory()
            return self._tokenizer

    # --- the interface ---------------------------------------------------------------------------------------------

    def sample(self, prompt: Sequence[int], params: SamplingParams, count: int) -> list[SampledSequence]:
        operation = wire.sample_operation(prompt, params, count, self._sampler_weights)
        sequences = self._sampling("sample", operation).get("sequences") or []
        if len(sequences) != count:
            raise ServiceError(f"sample: asked for {count} sequences, the service returned {len(sequences)}")
        return [wire.completion(sequence, params) for sequence in sequences]

    def forward_backward(self, data: Sequence[Datum], loss: LossName) -> ForwardBackwardResult:
        if not data:
            raise ValueError("forward_backward needs at least one datum")
        chunks = wire.chunked(data, max_datums=self._pacing.chunk_max_datums, max_values=self._pacing.chunk_max_values)
        with self._diagnosed("forwardBackward"), self._sequence_lock:
            operation_ids = [self._submit_training(wire.forward_backward_operation(chunk, loss)) for chunk in chunks]
        with self._diagnosed("forwardBackward"):
            results = [self._await_training(operation_id, "forwardBackward") for operation_id in operation_ids]
        targets = [[len(datum.tokens) - 1 for datum in chunk] for chunk in chunks]
        return wire.forward_backward_result(results, targets)

    def optim_step(self, adam: AdamParams) -> None:
        self._training("optimizerStep", {"optimizerStep": {"adamParamsConfig": wire.adam_config(adam)}})

    def save_weights_for_sampler(self, name: str) -> str:
        saved = self._training("saveWeights", {"saveWeights": {"description": name}})
        weights = self._saved_package(saved, "saveWeights")
        # As the library does before sampling saved weights: point the sampling path at them, then name them on
        # every sample.
        self._sampling("loadWeightsForSampling", {"loadWeightsForSampling": {"modelPackageArn": weights}})
        self._sampler_weights = weights
        return weights

    def save_state(self, name: str) -> str:
        return self._saved_package(self._training("saveState", {"saveState": {"description": name}}), "saveState")

    def load_state(self, reference: str) -> None:
        self._training("loadState", {"loadState": {"modelPackageArn": reference, "loadOptimizer": True}})

    def usage(self) -> TokenUsage:
        if not self._closing.is_set():
            self._describe()
        return self._usage

    def close(self) -> None:
        """Stop the session, wait until it can be deleted, and delete it. Raises ``ServiceError`` only when the
        session could not be stopped (it would go on billing); a delete that fails is logged."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._closing.set()
        status = self._teardown_status()
        if status is None:
            return
        if status not in _NOTHING_TO_STOP:
            try:
                self._call("StopTrainingSession", self._control.stop_training_session, TrainingSessionName=self.name)
            except ServiceError as error:
                # A session that reached an end state meanwhile answers a stop with a ValidationException.
                if self._teardown_status() not in _NOTHING_TO_STOP:
                    raise ServiceError(f"could not stop training session '{self.name}': {error}") from error
        status = self._await_deletable()
        if status is None:
            return
        if status not in _DELETABLE:
            logger.warning("training session %s is still %s; left for the service to remove", self.name, status)
            return
        try:
            self._call("DeleteTrainingSession", self._control.delete_training_session, TrainingSessionName=self.name)
        except ServiceError as error:
            if not isinstance(error.__cause__, ClientError) or error_code(error.__cause__) not in _NOT_FOUND:
                logger.warning("could not delete training session %s (%s): %s", self.name, status, error)

    def __enter__(self) -> SageMakerTrainingService:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    # --- the control plane -----------------------------------------------------------------------------------------

    def _describe(self) -> Mapping[str, Any]:
        detail: Mapping[str, Any] = self._call(
            "DescribeTrainingSession", self._control.describe_training_session, TrainingSessionName=self.name
        )["TrainingSessionDetail"]
        self._usage = wire.usage_from_description(detail)
        return detail

    def _wait_until_running(self) -> None:
        deadline = time.monotonic() + self._pacing.session_ready_timeout_s
        while True:
            detail = self._describe()
            status = detail["TrainingSessionStatus"]
            if status == "Running":
                return
            if status not in _COMING_UP:
                raise ServiceError(f"training session '{self.name}' is {status}{_reason(detail)}, not Running")
            if time.monotonic() >= deadline:
                raise ServiceError(
                    f"training session '{self.name}' is still {status} after {self._pacing.session_ready_timeout_s:g} s"
                )
            self._pause(self._pacing.session_poll_s)

    def _teardown_status(self) -> str | None:
        """The session's status (``None``: it does not exist), recording its final usage on the way."""
        try:
            return str(self._describe()["TrainingSessionStatus"])
        except ServiceError as error:
            if isinstance(error.__cause__, ClientError) and error_code(error.__cause__) in _NOT_FOUND:
                return None
            raise

    def _await_deletable(self) -> str | None:
        deadline = time.monotonic() + self._pacing.teardown_timeout_s
        while True:
            status = self._teardown_status()
            if status is None or status in _DELETABLE or time.monotonic() >= deadline:
                return status
            time.sleep(self._pacing.session_poll_s)

    # --- the runtime -----------------------------------------------------------------------------------------------

    def _training(self, kind: str, operation: dict[str, Any]) -> Mapping[str, Any]:
        with self._diagnosed(kind):
            return self._await_training(self._submit_training(operation), kind)

    def _submit_training(self, operation: dict[str, Any]) -> str:
        with self._sequence_lock:
            self._sequence += 1
            try:
                response = self._call(
                    "ExecuteTrainingOperation",
                    self._runtime.execute_training_operation,
                    trainingSessionName=self.name,
                    sequenceNumber=self._sequence,
                    clientToken=str(uuid.uuid4()),  # one per operation: a retried submit is not run twice
                    operationConfig=operation,
                )
            except ServiceError as error:
                # A request refused as invalid (by botocore, or by the service) started no operation, so its number
                # is free again; any other failure keeps it, as the library does: the service may have taken it, and
                # it runs operations strictly in order, so reusing it could run two under one number.
                if not error.infrastructure:
                    self._sequence -= 1
                raise
            return str(response["operationId"])

    def _await_training(self, operation_id: str, kind: str) -> Mapping[str, Any]:
        return self._await(
            kind,
            lambda: self._call(
                "GetTrainingOperationResult",
                self._runtime.get_training_operation_result,
                trainingSessionName=self.name,
                operationId=operation_id,
            ),
            operation_id,
        )

    def _sampling(self, kind: str, operation: dict[str, Any]) -> Mapping[str, Any]:
        with self._diagnosed(kind):
            response = self._call(
                "ExecuteSamplingOperation",
                self._runtime.execute_sampling_operation,
                trainingSessionName=self.name,
                operationConfig=operation,
            )
            operation_id = str(response["operationId"])
            return self._await(
                kind,
                lambda: self._call(
                    "GetSamplingOperationResult",
                    self._runtime.get_sampling_operation_result,
                    trainingSessionName=self.name,
                    operationId=operation_id,
                ),
                operation_id,
            )

    def _await(self, kind: str, poll: Callable[[], Mapping[str, Any]], operation_id: str) -> Mapping[str, Any]:
        """Poll an operation until it ends; its result (the union member named ``kind``) once Completed."""
        deadline = time.monotonic() + self._pacing.operation_timeout_s
        while True:
            answer = poll()
            status = answer["status"]
            if status == "Completed":
                return dict((answer.get("operationResult") or {}).get(kind) or {})
            if status in _OPERATION_FAILED:
                details = answer.get("errorDetails") or "no details"
                raise ServiceError(f"{kind} operation {operation_id} {status}: {details}")
            if time.monotonic() >= deadline:
                raise ServiceError(
                    f"{kind} operation {operation_id} still {status} after {self._pacing.operation_timeout_s:g} s"
                )
            self._pause(self._pacing.operation_poll_s)

    def _saved_package(self, result: Mapping[str, Any], kind: str) -> str:
        package = result.get("modelPackageArn")
        if not package:
            raise ServiceError(f"{kind} completed without a model package ARN")
        return str(package)

    @contextmanager
    def _diagnosed(self, kind: str) -> Iterator[None]:
        """An operation that failed because the session ended (it expired, failed, was stopped) says so."""
        if self._closing.is_set():
            raise ServiceError(f"{kind}: training session '{self.name}' is closed")
        try:
            yield
        except ServiceError as error:
            if self._closing.is_set():
                raise ServiceError(f"{kind}: training session '{self.name}' was closed while it ran") from error
            if not error.infrastructure:
                raise
            try:
                detail = self._describe()
            except ServiceError:
                raise error from None
            status = detail["TrainingSessionStatus"]
            if status in _ENDED:
                raise ServiceError(
                    f"{kind}: training session '{self.name}' is {status}{_reason(detail)} ({error})"
                ) from error
            raise

    # --- calls, retries, waits -------------------------------------------------------------------------------------

    def _call(self, action: str, method: Callable[..., Any], **request: Any) -> Any:
        attempt = 0
        while True:
            attempt += 1
            try:
                return method(**request)
            except ParamValidationError as error:
                raise ServiceError(
                    f"{action}: the request does not fit the service model: {error}", infrastructure=False
                ) from error
            except (ClientError, BotoCoreError) as error:
                if is_transient(error) and attempt < self._pacing.retry_attempts:
                    ceiling = min(self._pacing.backoff_max_s, self._pacing.backoff_base_s * 2 ** (attempt - 1))
                    jitter = random.uniform(0, ceiling)  # noqa: S311 - spreads retries, not cryptography
                    self._pause(jitter, during_teardown=action in _TEARDOWN_ACTIONS)
                    continue
                raise _service_error(action, error, attempts=attempt) from error

    def _pause(self, seconds: float, *, during_teardown: bool = False) -> None:
        """Sleep; a wait for a running session's work ends early, and fails, once the session is being closed."""
        if during_teardown:
            time.sleep(seconds)
            return
        if self._closing.wait(seconds):
            raise ServiceError(f"training session '{self.name}' was closed while waiting on it")


_TEARDOWN_ACTIONS = frozenset({"DescribeTrainingSession", "StopTrainingSession", "DeleteTrainingSession"})


def _reason(detail: Mapping[str, Any]) -> str:
    reason = detail.get("ErrorDetails")
    return f" ({reason})" if reason else ""


def _service_error(action: str, error: ClientError | BotoCoreError, *, attempts: int) -> ServiceError:
    if isinstance(error, ClientError):
        code = error_code(error)
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        return ServiceError(
            f"{action} failed{tries}: {code}: {error_message(error)}", infrastructure=code not in _INVALID_REQUEST
        )
    return ServiceError(f"{action} failed after {attempts} attempts: {error}")
