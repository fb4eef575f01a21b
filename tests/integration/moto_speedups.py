"""The moto patches the pipeline harness (pipeline_support.py) runs under, only while a pipeline runs: moto's Lambda
invoke runs the real handler, the ASL interpreter's retries record their waits instead of sleeping them, executions
announce their start and end, the ASL and the serializer's key aliases are worked out once, DynamoDB's conditional
writes are atomic, and every change in the world wakes ``Harness.wait_until``."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from moto.awslambda_simple.models import LambdaSimpleBackend
from moto.core.serialize import AttributePickerContext, XFormedAttributePicker
from moto.dynamodb.models import DynamoDBBackend
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor
from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

REPO = Path(__file__).resolve().parents[2]

_HANDLERS: dict[str, ModuleType] = {}
_DDB_LOCK = threading.RLock()
_WORLD = threading.Condition()
_world_version = 0


def world_version() -> int:
    """How many changes the world has seen (what ``wait_for_world_change`` compares with)."""
    with _WORLD:
        return _world_version


def wait_for_world_change(seen: int, timeout: float) -> None:
    """Return once the world has changed since it was at version ``seen``, or after ``timeout`` seconds."""
    with _WORLD:
        _WORLD.wait_for(lambda: _world_version != seen, timeout)


def world_changed() -> None:
    """Tell ``Harness.wait_until`` to look again (a table write, an adapter call, an execution's end)."""
    global _world_version  # noqa: PLW0603 - one counter for the process's one running pipeline
    with _WORLD:
        _world_version += 1
        _WORLD.notify_all()


def handler_module(name: str) -> ModuleType:
    if name not in _HANDLERS:
        path = REPO / "lambda" / name / "handler.py"
        spec = importlib.util.spec_from_file_location(f"mtrl_test_lambda_{name}", path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _HANDLERS[name] = module
    return _HANDLERS[name]


def _run_handler(  # noqa: PLR0917 - moto's signature
    self: LambdaSimpleBackend, function_name: str, qualifier: Any, body: Any, headers: Any, response_headers: Any
) -> bytes:
    """Replacement for LambdaSimpleBackend.invoke: run the real handler with the function's environment."""
    function = self.get_function(function_name, qualifier)
    name = function.function_name.removeprefix("mtrl-")
    configured = function.environment_vars or {}
    missing = {k: v for k, v in configured.items() if os.environ.get(k) != v}
    assert not missing, f"{name}: environment not applied: {missing}"
    event = json.loads(body) if body else {}
    try:
        result = handler_module(name).handler(event, None)
    except Exception as error:
        response_headers["x-amz-function-error"] = "Unhandled"
        return json.dumps({"errorType": type(error).__name__, "errorMessage": str(error)}).encode()
    return json.dumps(result).encode()


def _locked(method: Callable[..., Any], *, write: bool) -> Callable[..., Any]:
    # DynamoDB applies each conditional write atomically; moto's check-then-write is not thread-safe, and
    # the pipeline's executions run in parallel threads here.
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _DDB_LOCK:
            result = method(*args, **kwargs)
        if write:
            world_changed()
        return result

    return wrapper


class _RetryWaits:
    """Stands in for the ``time`` module of moto's retrier (its only use is ``time.sleep(interval)``): the interval
    the definition's Retry computed is recorded instead of slept, so a retried step is retried at once."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.seconds.append(seconds)


RETRY_WAITS = _RetryWaits()


class _ExecutionEnds:
    """Which executions' interpreter threads have started and ended, so a test waits for the end instead of polling
    DescribeExecution (moto sets an execution's final status as its thread ends, after any in-flight task)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.started: list[str] = []
        self.ended: set[str] = set()

    def reset(self) -> None:
        with self._changed:
            self.started, self.ended = [], set()

    def mark(self, execution_arn: str, *, ended: bool) -> None:
        with self._changed:
            if ended:
                self.ended.add(execution_arn)
            else:
                self.started.append(execution_arn)
            self._changed.notify_all()
        world_changed()

    def wait_ended(self, execution_arn: str, timeout: float) -> bool:
        with self._changed:
            # One this moto never started has nothing to wait for (DescribeExecution then says what it is).
            return self._changed.wait_for(
                lambda: execution_arn in self.ended or execution_arn not in self.started, timeout
            )

    def wait_started(self, count: int, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: len(self.started) >= count, timeout)


def _tracked_start(worker: ExecutionWorker) -> None:
    EXECUTIONS.mark(worker._evaluation_details.execution_details.arn, ended=False)
    _original_start(worker)


def _tracked_execution_logic(worker: ExecutionWorker) -> None:
    try:
        _original_execution_logic(worker)
    finally:
        EXECUTIONS.mark(worker._evaluation_details.execution_details.arn, ended=True)


EXECUTIONS = _ExecutionEnds()
_PARSE_TREES: dict[str, Any] = {}
_original_parse = AmazonStateLanguageParser.parse


def _parse_once(definition: str) -> tuple[Any, Any]:
    """moto's ASL parse with the ANTLR tree kept per definition text: the interpreter parses the whole definition
    at CreateStateMachine and again at every execution (~0.25 s each), always the same text here. Each call still
    builds fresh evaluation components from the tree, as moto does, so no execution shares one with another."""
    tree = _PARSE_TREES.get(definition)
    if tree is None:
        _program, tree = _original_parse(definition)  # syntax errors raise as before and are never kept
        _PARSE_TREES[definition] = tree
    return Preprocessor().visit(tree), tree


_ALIASES: dict[tuple[Any, ...], tuple[Any, Any, tuple[str, ...]]] = {}
_original_possible_keys = XFormedAttributePicker.get_possible_keys


def _possible_keys_once(picker: XFormedAttributePicker, context: AttributePickerContext) -> Any:
    """moto's response serializer asks which keys may hold each member of each shape for every value it writes
    (six alias providers, each built anew, per member of every DynamoDB attribute value of every record read); for a
    plain dict the answer depends only on the shape, its parent and the member name, so it is worked out once."""
    if type(context.obj) is not dict:  # other objects may carry their own aliases (Meta, class name)
        return _original_possible_keys(picker, context)
    shape, parent = context.shape, getattr(context.shape, "parent", None)
    key = (tuple(picker.alias_providers), id(shape), id(parent), context.key)
    cached = _ALIASES.get(key)
    if cached is None:
        # shape and parent are kept with the answer, so their ids are never reused for another shape
        cached = _ALIASES[key] = (shape, parent, tuple(_original_possible_keys(picker, context)))
    return cached[2]


_original_start = ExecutionWorker.start
_original_execution_logic = ExecutionWorker._execution_logic


_clients: dict[tuple[str, str], Any] = {}


def _cached_client(region: str, service: str, state_credentials: Any = None) -> Any:
    # moto's interpreter builds a new boto3 client for every Lambda task (~50 ms each); clients are
    # thread-safe, so one per service (kept across tests, like the harness's own) keeps the executions fast.
    key = (region, service)
    if key not in _clients:
        _clients[key] = _original_client_for(region, service, state_credentials)
    return _clients[key]


_original_client_for = lambda_eval_utils.boto_client_for


@contextlib.contextmanager
def patched_moto() -> Iterator[None]:
    """The moto patches, only while a pipeline runs (other tests in the process get moto as shipped)."""
    saved = [
        (LambdaSimpleBackend, "invoke", LambdaSimpleBackend.invoke),
        (lambda_eval_utils, "boto_client_for", lambda_eval_utils.boto_client_for),
        (retrier_decl, "time", retrier_decl.time),
        (ExecutionWorker, "start", ExecutionWorker.start),
        (AmazonStateLanguageParser, "parse", vars(AmazonStateLanguageParser)["parse"]),
        (XFormedAttributePicker, "get_possible_keys", XFormedAttributePicker.get_possible_keys),
        (ExecutionWorker, "_execution_logic", ExecutionWorker._execution_logic),
        *[(DynamoDBBackend, name, getattr(DynamoDBBackend, name)) for name in _DDB_METHODS],
    ]
    LambdaSimpleBackend.invoke = _run_handler  # type: ignore[method-assign]
    lambda_eval_utils.boto_client_for = _cached_client
    retrier_decl.time = RETRY_WAITS  # type: ignore[assignment]
    ExecutionWorker.start = _tracked_start  # type: ignore[method-assign]
    AmazonStateLanguageParser.parse = staticmethod(_parse_once)  # type: ignore[method-assign,assignment]
    XFormedAttributePicker.get_possible_keys = _possible_keys_once  # type: ignore[method-assign,assignment]
    ExecutionWorker._execution_logic = _tracked_execution_logic  # type: ignore[method-assign]
    for name in _DDB_METHODS:
        setattr(DynamoDBBackend, name, _locked(getattr(DynamoDBBackend, name), write=name in _DDB_WRITES))
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


_DDB_WRITES = ("put_item", "update_item", "delete_item")
_DDB_METHODS = (*_DDB_WRITES, "get_item", "query", "scan")
