"""A fake SageMaker training session: the control plane answered through ``FakeAws`` (botocore validates each request
before it is answered; each answer is validated against the output shape), and the session runtime served over real
HTTP on 127.0.0.1, at the rest-json paths the botocore model defines, with every request body and every answer
validated against the model's shapes.

One ``FakeSession`` holds the session's state for both; tests script it (statuses on the way up, operations that
fail, throttling, an operation that never ends, expiry) and read back what was asked.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
from aws_fakes import ACCOUNT, REGION, FakeAws, FakeError
from botocore.model import OperationModel, Shape
from botocore.validate import ParamValidator

from mtrl.backends.sessions.runner import Progress, RunConfig, session_config
from mtrl.backends.sessions.sagemaker_service import Pacing, SageMakerTrainingService, session_clients
from tests.http_serving import serving

RUNTIME = "sagemakertrainingsessionruntime"
PACKAGE_GROUP = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package-group/mtrl-sessions"


def package_arn(version: int) -> str:
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package/mtrl-sessions/{version}"


@dataclass
class Operation:
    kind: str
    request: dict[str, Any]
    polls_left: int
    status: str = "InProgress"
    result: dict[str, Any] = field(default_factory=dict)
    error: str = ""


@dataclass
class FakeSession:
    """The session and its runtime. ``coming_up``: the statuses Describe reports before Running (a status outside
    Created/Scheduled there ends the wait); ``polls``: InProgress answers before an operation ends."""

    coming_up: list[str] = field(default_factory=lambda: ["Created", "Scheduled"])
    polls: int = 1
    fail: dict[str, str] = field(default_factory=dict)  # operation kind -> errorDetails: that operation Fails
    hold: set[str] = field(default_factory=set)  # operation kinds that never end
    expire_on: str = ""  # the session expires when an operation of this kind is submitted
    throttle: dict[str, int] = field(default_factory=dict)  # runtime operation -> 429s before it is served
    faults: dict[str, int] = field(default_factory=dict)  # runtime operation -> 500s before it is served
    trainer_logprob_shift: float = -0.25
    name: str = ""
    status: str = "Absent"
    error_details: str = ""
    usage: dict[str, int] = field(default_factory=lambda: {"prefill": 0, "sample": 0, "train": 0})
    operations: dict[str, Operation] = field(default_factory=dict)
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    sequence_numbers: list[int] = field(default_factory=list)
    packages: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def requested(self, operation: str) -> list[dict[str, Any]]:
        return [request for name, request in self.requests if name == operation]

    # --- control plane -------------------------------------------------------------------------------------------

    def attach(self, aws: FakeAws) -> None:
        for operation, handler in {
            "CreateTrainingSession": self._create,
            "DescribeTrainingSession": self._describe,
            "StopTrainingSession": self._stop,
            "DeleteTrainingSession": self._delete,
        }.items():
            aws.on("sagemaker", operation, self._recorded(operation, handler))

    def _recorded(self, operation: str, handler: Any) -> Any:
        def answer(params: dict[str, Any]) -> dict[str, Any]:
            with self.lock:
                self.requests.append((operation, {k: v for k, v in params.items() if not k.startswith("__")}))
                return handler(params)  # type: ignore[no-any-return]

        return answer

    @property
    def arn(self) -> str:
        return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-session/{self.name}"

    def _create(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.status != "Absent":
            raise FakeError("ResourceInUse", f"training session {self.name} exists")
        self.name, self.status = params["TrainingSessionName"], "Created"
        return {"TrainingSessionArn": self.arn}

    def _found(self, params: dict[str, Any]) -> None:
        if self.status in ("Absent", "Deleted") or params["TrainingSessionName"] != self.name:
            raise FakeError("ResourceNotFound", f"training session {params['TrainingSessionName']} not found")

    def _describe(self, params: dict[str, Any]) -> dict[str, Any]:
        self._found(params)
        if self.status in ("Created", "Scheduled"):
            self.status = self.coming_up.pop(0) if self.coming_up else "Running"
        elif self.status == "Stopping":
            self.status = "Stopped"
        detail: dict[str, Any] = {
            "TrainingSessionArn": self.arn,
            "TrainingSessionName": self.name,
            "TrainingSessionStatus": self.status,
            "CreationTime": datetime(2026, 12, 7, tzinfo=UTC),
            "BillableTokenUsage": {
                "PrefillTokenCount": self.usage["prefill"],
                "SampleTokenCount": self.usage["sample"],
                "TrainingTokenCount": self.usage["train"],
            },
        }
        if self.error_details:
            detail["ErrorDetails"] = self.error_details
        return {"TrainingSessionDetail": detail}

    def _stop(self, params: dict[str, Any]) -> dict[str, Any]:
        self._found(params)
        if self.status in ("Stopping", "Stopped", "Failed", "Expired", "Deleting", "DeletionFailed"):
            raise FakeError("ValidationException", f"invalid session state transition from {self.status} to Stopping")
        self.status = "Stopping"
        return {}

    def _delete(self, params: dict[str, Any]) -> dict[str, Any]:
        self._found(params)
        if self.status not in ("Stopped", "Failed", "DeletionFailed", "Expired"):
            raise FakeError("ValidationException", f"cannot delete a training session that is {self.status}")
        self.status = "Deleted"
        return {}

    # --- runtime ---------------------------------------------------------------------------------------------------

    def serve(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.requests.append((operation, params))
            if self.throttle.get(operation, 0) > 0:
                self.throttle[operation] -= 1
                raise FakeError("ThrottlingException", "Rate exceeded", 429)
            if self.faults.get(operation, 0) > 0:
                self.faults[operation] -= 1
                raise FakeError("InternalServerException", "internal error", 500)
            if params["trainingSessionName"] != self.name or self.status in ("Absent", "Deleted"):
                raise FakeError("ResourceNotFoundException", "no such training session", 404)
            if operation in ("ExecuteTrainingOperation", "ExecuteSamplingOperation"):
                return self._submit(operation, params)
            return self._poll(params["operationId"])

    def _submit(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        ((kind, config),) = params["operationConfig"].items()
        if kind == self.expire_on:
            self.status, self.error_details = "Expired", "the session was idle past its limit"
        if self.status not in ("Running", "Blocked"):
            raise FakeError("ConflictException", f"training session {self.name} is {self.status}", 409)
        if operation == "ExecuteTrainingOperation":
            self.sequence_numbers.append(params["sequenceNumber"])
            assert params["sequenceNumber"] == len(self.sequence_numbers), "sequence numbers must run 1, 2, 3, ..."
        operation_id = f"op-{len(self.operations) + 1}"
        self.operations[operation_id] = Operation(kind, config, self.polls)
        return {"operationId": operation_id}

    def _poll(self, operation_id: str) -> dict[str, Any]:
        operation = self.operations[operation_id]
        if operation.status == "InProgress" and operation.kind not in self.hold:
            if operation.polls_left > 0:
                operation.polls_left -= 1
            elif operation.kind in self.fail:
                operation.status, operation.error = "Failed", self.fail[operation.kind]
            else:
                operation.status, operation.result = "Completed", {operation.kind: self._run(operation)}
        answer: dict[str, Any] = {"status": operation.status}
        if operation.status == "Completed":
            answer["operationResult"] = operation.result
        if operation.error:
            answer["errorDetails"] = operation.error
        return answer

    def _run(self, operation: Operation) -> dict[str, Any]:
        request = operation.request
        if operation.kind == "sample":
            prompt = sum(len(chunk["tokens"]) for chunk in request["prompt"]["chunks"])
            sequences = [
                {"stopReason": "stop", "tokens": [100 + index, 7, 2], "logprobs": [-0.5, -0.25 * index, -0.125]}
                for index in range(request["numSamples"])
            ]
            self.usage["prefill"] += prompt * request["numSamples"]
            self.usage["sample"] += 3 * request["numSamples"]
            return {"sequences": sequences}
        if operation.kind == "forwardBackward":
            outputs = []
            for datum in request["datumList"]:
                inputs = datum["lossFnInputs"]
                self.usage["train"] += len(inputs["target_tokens"]["data"])
                logprobs = [lp + self.trainer_logprob_shift for lp in inputs["logprobs"]["data"]]
                outputs.append({"logprobs": {"data": logprobs, "dtype": "float32"}})
            return {"lossFnOutputs": outputs, "metrics": {"loss": 0.5 * len(request["datumList"])}}
        if operation.kind in ("saveWeights", "saveState"):
            self.packages += 1
            return {"modelPackageArn": package_arn(self.packages)}
        if operation.kind == "optimizerStep":
            return {"metrics": {"learning_rate": request["adamParamsConfig"]["learningRate"]}}
        return {}


class RuntimeServer(ThreadingHTTPServer):
    """The session runtime at its botocore-model paths; ``session`` answers, the model checks both directions."""

    daemon_threads = True

    def __init__(self, session: FakeSession, boto: boto3.Session) -> None:
        super().__init__(("127.0.0.1", 0), _RuntimeHandler)
        self.session = session
        self.model = boto._session.get_service_model(RUNTIME)
        self.routes: list[tuple[str, re.Pattern[str], OperationModel]] = []
        for name in self.model.operation_names:
            operation = self.model.operation_model(name)
            pattern = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", operation.http["requestUri"])
            self.routes.append((operation.http["method"], re.compile(f"^{pattern}$"), operation))
        self.invalid: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _RuntimeHandler(BaseHTTPRequestHandler):
    server: RuntimeServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def _handle(self) -> None:
        path = self.path.split("?", 1)[0]
        for method, pattern, route in self.server.routes:
            match = pattern.match(path)
            if method == self.command and match:
                operation = route
                break
        else:
            self._reply(404, {"message": f"no route {self.command} {path}"}, "UnknownOperationException")
            return
        length = int(self.headers.get("Content-Length") or 0)
        params = json.loads(self.rfile.read(length) or b"{}") if length else {}
        params.update(match.groupdict())
        report = ParamValidator().validate(params, operation.input_shape)
        if report.has_errors():
            self.server.invalid.append(report.generate_report())
            self._reply(400, {"message": report.generate_report()}, "ValidationException")
            return
        beyond = list(_over_max(params, operation.input_shape, "input"))
        if beyond:  # the service's own check: botocore validates only lower bounds
            self._reply(400, {"message": f"value above its maximum: {', '.join(beyond)}"}, "ValidationException")
            return
        try:
            answer = self.server.session.serve(operation.name, params)
        except FakeError as error:
            self._reply(error.status, {"message": error.message}, error.code)
            return
        report = ParamValidator().validate(answer, operation.output_shape)
        if report.has_errors():
            self.server.invalid.append(f"fake {operation.name} answer: {report.generate_report()}")
        self._reply(200, answer)

    def _reply(self, status: int, body: dict[str, Any], error_type: str = "") -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        if error_type:
            self.send_header("x-amzn-errortype", error_type)
        self.end_headers()
        self.wfile.write(payload)


def _over_max(value: Any, shape: Shape, path: str) -> Iterator[str]:
    """The members of a request above the ``max`` the model gives them (numbers: the value; strings, lists: length)."""
    if shape.type_name == "structure" and isinstance(value, dict):
        for name, member in shape.members.items():
            if name in value:
                yield from _over_max(value[name], member, f"{path}.{name}")
    elif shape.type_name == "list" and isinstance(value, list):
        for index, item in enumerate(value):
            yield from _over_max(item, shape.member, f"{path}[{index}]")
    limit = shape.metadata.get("max")
    if limit is not None:
        size = len(value) if isinstance(value, str | list) else value
        if isinstance(size, int | float) and size > limit:
            yield path


@contextmanager
def runtime_server(session: FakeSession, boto: boto3.Session) -> Iterator[RuntimeServer]:
    with serving(RuntimeServer(session, boto)) as server:
        yield server
        assert not server.invalid, "\n".join(server.invalid)


# Waits and retries shortened: the fake answers at once.
FAST = Pacing(
    session_poll_s=0.001,
    session_ready_timeout_s=5,
    operation_poll_s=0.001,
    operation_timeout_s=5,
    teardown_timeout_s=5,
    retry_attempts=2,
    backoff_base_s=0.001,
    backoff_max_s=0.002,
)


class FakeTokenizer:
    """Stands in for the base model's tokenizer (the loop renders and counts tokens; the model is the service's)."""

    eos_token_ids = (2,)

    def render(self, messages: Any, *, add_generation_prompt: bool) -> list[int]:
        return [1, *(len(message["content"]) % 50 for message in messages)]

    def decode(self, tokens: Any) -> str:
        return " ".join(map(str, tokens))


def session_opener(boto: boto3.Session, fake: FakeSession, runtime_url: str, region: str = REGION) -> Any:
    """The runner's ``open``: a SageMaker training service on the fake session (control plane through ``boto``'s
    clients, the runtime at ``runtime_url``)."""

    def open_session(run_config: RunConfig, progress: Progress) -> SageMakerTrainingService:
        # The fake holds one session at a time: the last one was deleted; the new one numbers its operations anew.
        fake.status, fake.sequence_numbers = "Absent", []
        control, runtime = session_clients(boto, region, runtime_endpoint_url=runtime_url)
        return SageMakerTrainingService.open(
            session_config(run_config, progress.sessions[-1]),
            control=control,
            runtime=runtime,
            tokenizer_factory=FakeTokenizer,
            pacing=FAST,
        )

    return open_session
