"""Run the real pipeline (ASL file + Lambda handlers) inside moto, with a test-double backend adapter.

What is real: ``statemachine/pipeline.asl.json`` executed by moto's interpreter, every handler in
``lambda/<name>/handler.py`` (imported and called through moto's Lambda invoke), the run table, the data
bucket, S3 → EventBridge delivery with the stack's own upload pattern, and SNS. What is adapted for
speed: the poll intervals come from settings set to 0 s; the interpreter records each Retry interval instead of
sleeping it (the retry itself happens as the ASL says); the ASL is parsed once per definition text; tests wait for
events (an execution's end, a table write, an adapter call: ``Harness.wait``, ``Harness.wait_until``), not for time.
What stands in: the backend adapter (``FakeAdapter``) and EventBridge → Lambda delivery (moto does not
deliver to Lambda targets, so the rule targets an SQS capture queue and the test feeds the trigger).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from moto import mock_aws

from mtrl.contracts.backend import BackendError, CreatedResource, Finding, JobState, JobStatus, RunContext
from mtrl.contracts.registry import backend_names
from mtrl.runs import adapters, runtime
from mtrl.runs.runtime import (
    ENV_BACKEND_FUNCTION,
    ENV_BACKEND_SETTINGS,
    ENV_BUCKET,
    ENV_STATE_MACHINE,
    ENV_TABLE,
    ENV_TOPIC,
)
from mtrl.settings.pipeline import PIPELINE_SETTINGS_ENV, PipelineSettings
from stacks.constructs.pipeline_events import upload_event_pattern
from stacks.constructs.pipeline_state_machine import SUBSTITUTIONS
from tests.aws_fixtures import fake_credentials_in_environ
from tests.integration.moto_speedups import (
    EXECUTIONS,
    RETRY_WAITS,
    patched_moto,
    wait_for_world_change,
    world_changed,
    world_version,
)
from tests.run_table import create_run_table

REPO = Path(__file__).resolve().parents[2]
ASL_PATH = REPO / "statemachine" / "pipeline.asl.json"
REGION = "us-east-1"
ACCOUNT = "123456789012"
BUCKET = "mtrl-data-test"
TABLE = "mtrl-runs-test"
FUNCTIONS = ("trigger", "register", "acquire_slot", "validate", "backend", "report", "reaper")
SUBSTITUTION_FUNCTION = {
    "RegisterFunctionArn": "register",
    "AcquireSlotFunctionArn": "acquire_slot",
    "ValidateFunctionArn": "validate",
    "BackendFunctionArn": "backend",
    "ReportFunctionArn": "report",
}
MOTO_CONFIG: Any = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}


def wordle_rows(count: int, *, start: int = 0) -> list[dict[str, Any]]:
    words = ["crane", "slate", "pious", "mango", "vivid", "bread", "plumb", "quart"]
    return [
        {
            "id": f"w-{i:05d}",
            "metadata": {
                "prompt": [
                    {"role": "system", "content": "Play Wordle: guess the five-letter word in six tries."},
                    {"role": "user", "content": f"Game {i}: make your first guess."},
                ],
                "answer": words[i % len(words)],
                "task": "wordle",
            },
        }
        for i in range(start, start + count)
    ]


def jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


# ---------------------------------------------------------------------------------------------------
# The test double behind the adapter interface
@dataclass
class FakeAdapter:
    """A backend that keeps its 'infrastructure' in memory and fails where told to."""

    name: str = "local"
    fail_preflight: bool = False
    fail_at: set[str] = field(default_factory=set)  # provision / submit / status / evaluate
    job_states: list[JobState] = field(default_factory=lambda: [JobState.RUNNING, JobState.SUCCEEDED])
    hang: bool = False  # the job never finishes
    cost_usd: float | None = None  # reported by status while the job runs
    cleanup_failures: int = 0  # cleanup raises this many times (transiently) before it works
    live: set[str] = field(default_factory=set)  # resources that currently exist
    calls: list[tuple[str, str]] = field(default_factory=list)
    active: set[str] = field(default_factory=set)
    max_active: int = 0
    acquired_order: list[str] = field(default_factory=list)
    _polls: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _call(self, phase: str, run: RunContext) -> None:
        with self._lock:
            self.calls.append((phase, run.run_id))
        world_changed()
        if phase in self.fail_at:
            raise BackendError(f"{phase} exploded on purpose")

    def phases(self, run_id: str) -> list[str]:
        return [phase for phase, rid in self.calls if rid == run_id]

    def preflight(self, run: RunContext) -> list[Finding]:
        self._call("preflight", run)
        if self.fail_preflight:
            return [Finding("quota", False, "no ml.p5.48xlarge capacity in us-east-1 (request a quota increase)")]
        return [Finding("quota", True, "capacity available")]

    def provision(self, run: RunContext) -> list[CreatedResource]:
        self._call("provision", run)
        resource = CreatedResource("fake-workers", f"{run.run_id}-workers", {"count": 2})
        run.record_resource(resource)  # recorded before it exists
        with self._lock:
            self.live.add(resource.identifier)
            self.active.add(run.run_id)
            self.acquired_order.append(run.run_id)
            self.max_active = max(self.max_active, len(self.active))
        return [resource]

    def submit(self, run: RunContext) -> str:
        self._call("submit", run)
        with self._lock:
            self.live.add(f"{run.run_id}-job")
        return f"job-{run.run_id}"

    def status(self, run: RunContext, job_id: str) -> JobStatus:
        self._call("status", run)
        with self._lock:
            count = self._polls.get(run.run_id, 0)
            self._polls[run.run_id] = count + 1
        if self.hang:
            time.sleep(0.05)
            cost = {"cost_usd": self.cost_usd} if self.cost_usd is not None else {}
            return JobStatus(JobState.RUNNING, progress={"step": count}, metrics=cost)
        state = self.job_states[min(count, len(self.job_states) - 1)]
        metrics = {"reward_mean": 0.5} if state is JobState.SUCCEEDED else {}
        return JobStatus(
            state,
            message="job crashed (OOM)" if state is JobState.FAILED else "",
            metrics=metrics,
            progress={"step": count + 1},
        )

    def evaluate(self, run: RunContext) -> dict[str, float]:
        self._call("evaluate", run)
        return {"pass@1": 0.25}

    def cancel(self, run: RunContext, job_id: str) -> None:
        self._call("cancel", run)
        with self._lock:
            self.live.discard(f"{run.run_id}-job")

    def cleanup(self, run: RunContext) -> list[CreatedResource]:
        world_changed()
        with self._lock:
            self.calls.append(("cleanup", run.run_id))
            if self.cleanup_failures > 0:
                self.cleanup_failures -= 1
                raise BackendError("workers still draining", transient=True)
            for resource in run.resources:
                self.live.discard(resource.identifier)
            self.live.discard(f"{run.run_id}-job")
            self.active.discard(run.run_id)
        return list(run.resources)


# ---------------------------------------------------------------------------------------------------
@dataclass
class Harness:
    adapter: Any  # FakeAdapter, or a real adapter (tests/integration/test_*backend*.py)
    settings: PipelineSettings
    s3: Any
    ddb: Any
    sfn: Any
    sqs: Any
    lambda_client: Any
    state_machine_arn: str
    capture_queue: str
    notification_queue: str
    retry_waits: list[float]  # each Retry interval the interpreter computed (recorded, not slept)

    # -- uploads and events ------------------------------------------------------------------------
    def put(self, key: str, body: bytes) -> str:
        return str(self.s3.put_object(Bucket=BUCKET, Key=key, Body=body)["VersionId"])

    def captured_events(self, expected: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Events the upload rule matched (moto's real S3 → EventBridge path, with the stack's pattern)."""
        events: list[dict[str, Any]] = []
        deadline = time.time() + timeout
        while len(events) < expected and time.time() < deadline:
            response = self.sqs.receive_message(QueueUrl=self.capture_queue, MaxNumberOfMessages=10)
            for message in response.get("Messages", []):
                events.append(json.loads(message["Body"]))
                self.sqs.delete_message(QueueUrl=self.capture_queue, ReceiptHandle=message["ReceiptHandle"])
        return events

    def deliver(self, event: dict[str, Any]) -> dict[str, Any]:
        """What EventBridge does on AWS: invoke the trigger function with the event."""
        return self.invoke("trigger", event)

    def invoke(self, name: str, event: dict[str, Any]) -> dict[str, Any]:
        response = self.lambda_client.invoke(FunctionName=f"mtrl-{name}", Payload=json.dumps(event).encode())
        payload = json.loads(response["Payload"].read())
        if response.get("FunctionError"):
            raise RuntimeError(f"{name} failed: {payload}")
        return dict(payload)

    def upload_and_trigger(self, key: str, body: bytes) -> dict[str, Any]:
        self.put(key, body)
        (event,) = self.captured_events(1)
        return self.deliver(event)

    # -- executions ----------------------------------------------------------------------------------
    def executions(self) -> list[dict[str, Any]]:
        return list(self.sfn.list_executions(stateMachineArn=self.state_machine_arn)["executions"])

    def wait(self, execution_arn: str, timeout: float = 180.0) -> dict[str, Any]:
        """The execution's description once its interpreter thread has ended (nothing of it still in flight)."""
        EXECUTIONS.wait_ended(execution_arn, timeout)
        description = self.sfn.describe_execution(executionArn=execution_arn)
        if description["status"] == "RUNNING":
            raise TimeoutError(f"{execution_arn} still running after {timeout} s")
        return dict(description)

    def wait_all(self, count: int, timeout: float = 180.0) -> list[dict[str, Any]]:
        deadline = time.time() + timeout
        EXECUTIONS.wait_started(count, timeout)
        return [self.wait(e["executionArn"], max(1.0, deadline - time.time())) for e in self.executions()]

    def wait_until(self, predicate: Callable[[], Any], timeout: float = 180.0) -> None:
        """Return once ``predicate()`` holds, checking it after each change in the world (``world_changed``) and at
        least every half second for changes nobody announces (a state entered); fail after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            seen = world_version()
            if predicate():
                return
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"not reached within {timeout} s"
            wait_for_world_change(seen, min(remaining, 0.5))

    def entered_states(self, execution_arn: str) -> list[str]:
        history = self.sfn.get_execution_history(executionArn=execution_arn, maxResults=1000)["events"]
        return [e["stateEnteredEventDetails"]["name"] for e in history if "stateEnteredEventDetails" in e]

    # -- records -------------------------------------------------------------------------------------
    def record(self, run_id: str) -> dict[str, Any]:
        from mtrl.runs.registry import RunRegistry

        return RunRegistry(self.ddb, TABLE).get(run_id)

    def runs(self) -> list[dict[str, Any]]:
        from mtrl.runs.registry import decode_item

        items = self.ddb.scan(TableName=TABLE)["Items"]
        return [decode_item(item) for item in items if item["sk"]["S"] == "RUN"]

    def slots(self) -> dict[str, Any]:
        from mtrl.runs.slots import SlotPool

        pool = SlotPool(
            self.ddb, TABLE, capacity=self.settings.max_concurrent_runs, lease_seconds=60, stale_after_seconds=300
        )
        return pool.snapshot()

    def notifications(self) -> list[dict[str, str]]:
        found = []
        while True:
            response = self.sqs.receive_message(QueueUrl=self.notification_queue, MaxNumberOfMessages=10)
            messages = response.get("Messages", [])
            if not messages:
                return found
            for message in messages:
                body = json.loads(message["Body"])
                found.append({"subject": body.get("Subject", ""), "message": body["Message"]})
                self.sqs.delete_message(QueueUrl=self.notification_queue, ReceiptHandle=message["ReceiptHandle"])

    def object_json(self, key: str) -> dict[str, Any]:
        return dict(json.loads(self.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()))

    def shift_clock(self, seconds: float) -> None:
        """Make every phase see a later time (for the run timeout) without waiting for it."""
        for cached in runtime._cache.values():
            cached.clock = lambda: time.time() + seconds


def _setup(adapter: Any, settings: PipelineSettings, backend_settings: dict[str, Any] | None = None) -> Harness:
    s3, ddb, sfn, sqs, sns, events, lam, iam = (
        _harness_client(name) for name in ("s3", "dynamodb", "stepfunctions", "sqs", "sns", "events", "lambda", "iam")
    )
    s3.create_bucket(Bucket=BUCKET)
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_notification_configuration(Bucket=BUCKET, NotificationConfiguration={"EventBridgeConfiguration": {}})
    create_run_table(ddb, TABLE)
    capture = sqs.create_queue(QueueName="upload-capture")["QueueUrl"]
    capture_arn = sqs.get_queue_attributes(QueueUrl=capture, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name="upload", EventPattern=json.dumps(upload_event_pattern(BUCKET)))
    events.put_targets(Rule="upload", Targets=[{"Id": "capture", "Arn": capture_arn}])
    topic_arn = sns.create_topic(Name="mtrl-runs")["TopicArn"]
    notified = sqs.create_queue(QueueName="notifications")["QueueUrl"]
    notified_arn = sqs.get_queue_attributes(QueueUrl=notified, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=notified_arn)
    role = iam.create_role(RoleName="pipeline", AssumeRolePolicyDocument="{}")["Role"]["Arn"]

    common = {
        ENV_TABLE: TABLE,
        ENV_BUCKET: BUCKET,
        PIPELINE_SETTINGS_ENV: settings.model_dump_json(),
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }
    machine_name = "mtrl-training-run"
    state_machine_arn = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{machine_name}"
    extra = {
        "trigger": {ENV_STATE_MACHINE: state_machine_arn},
        "report": {ENV_TOPIC: topic_arn},
        "reaper": {ENV_TOPIC: topic_arn, ENV_BACKEND_FUNCTION: "mtrl-backend"},
        "backend": {
            ENV_TOPIC: topic_arn,
            # The harness's runs may choose any backend: each backend's section gets the world's values.
            ENV_BACKEND_SETTINGS: json.dumps(
                {key: {"region": REGION, **(backend_settings or {})} for key in backend_names()}
            ),
        },
    }
    arns = {}
    for name in FUNCTIONS:
        variables = {**common, **extra.get(name, {})}
        arns[name] = lam.create_function(
            FunctionName=f"mtrl-{name}",
            Runtime="python3.12",
            Role=role,
            Handler="handler.handler",
            Code={"ZipFile": _empty_zip()},
            Environment={"Variables": variables},
        )["FunctionArn"]
        os.environ.update(variables)  # one process plays every function (their variables never conflict)
    text = ASL_PATH.read_text()
    for substitution in SUBSTITUTIONS:
        text = text.replace("${" + substitution + "}", arns[SUBSTITUTION_FUNCTION[substitution]])
    assert "${" not in text
    created = sfn.create_state_machine(name=machine_name, definition=text, roleArn=role)
    assert created["stateMachineArn"] == state_machine_arn
    RETRY_WAITS.seconds = []
    EXECUTIONS.reset()
    return Harness(adapter, settings, s3, ddb, sfn, sqs, lam, state_machine_arn, capture, notified, RETRY_WAITS.seconds)


def _empty_zip() -> bytes:
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("handler.py", "def handler(event, context):\n    return event\n")
    return buffer.getvalue()


_SESSIONS: list[boto3.Session] = []


def _shared_session() -> boto3.Session:
    """One boto3 session for the process, made on first use: the harness's clients and, as each pipeline's default
    session, the functions' (``boto3.client`` in ``mtrl.runs.runtime``). mock_aws starts every test with no default
    session, so each test's functions made theirs anew and parsed the service models and endpoint tables again
    (~0.5 s of CPU a test, and garbage for the collector); a Lambda container parses them once, as this does. The
    session holds no AWS state (credentials and region come from the environment each pipeline sets)."""
    if not _SESSIONS:
        _SESSIONS.append(boto3.Session())
    return _SESSIONS[0]


_HARNESS_CLIENTS: dict[str, Any] = {}


def _harness_client(service: str) -> Any:
    # Made once per process and kept across tests (~40 ms each, eight per test): a client holds no AWS state, and
    # moto answers every client made after it was imported; each test's mock_aws still starts from an empty world.
    if service not in _HARNESS_CLIENTS:
        _HARNESS_CLIENTS[service] = _shared_session().client(service, region_name=REGION)
    return _HARNESS_CLIENTS[service]


def running_pipeline(
    adapter: Any = None,
    *,
    backend_name: str | None = "local",
    backend_settings: Callable[[], dict[str, Any]] | None = None,
    **overrides: Any,
) -> Iterator[Harness]:
    """Generator for a pytest fixture: moto up, pipeline deployed, adapter registered as ``backend_name`` (with
    the deploy-time settings ``backend_settings()`` returns once moto is up — it may create the backend's world —
    as the backend's stack side ships them); all undone after. ``backend_name`` None: no adapter is
    registered, each backend's descriptor builds its own (``mtrl.contracts.registry``)."""
    values = {
        "run_backend": "local",
        "slot_poll_seconds": 0,
        "status_poll_seconds": 0,
        "provision_poll_seconds": 0,
        "provision_max_wait_minutes": 5,
        "evaluation_poll_seconds": 0,
        "evaluation_max_wait_minutes": 5,
        # With 0 s polls these keep the history-size check (one poll per second assumed) satisfied.
        "slot_max_wait_minutes": 5,
        "run_timeout_minutes": 5,
        "max_concurrent_runs": 1,
        **overrides,
    }
    settings = PipelineSettings.model_validate(values)
    fake = adapter or FakeAdapter()
    runtime._cache.clear()
    if backend_name is not None:
        adapters.register_adapter(backend_name, lambda: fake)
    try:
        # The whole environment comes back after: the pipeline's functions read their settings from it.
        with fake_credentials_in_environ(REGION), patched_moto(), mock_aws(config=MOTO_CONFIG):
            boto3.DEFAULT_SESSION = _shared_session()  # mock_aws put None there, and puts the old one back after
            yield _setup(fake, settings, backend_settings() if backend_settings else None)
    finally:
        if backend_name is not None:
            adapters.unregister_adapter(backend_name)
        runtime._cache.clear()


pipeline_context = contextlib.contextmanager(running_pipeline)


def assert_cleanly_finished(pipeline: Harness, run_id: str, status: str) -> dict[str, Any]:
    """The checks every terminal path must pass: final record, nothing left, slot and queue free, summary."""
    record = pipeline.record(run_id)
    assert record["status"] == status
    assert record["finished_at"]
    assert pipeline.adapter.live == set(), "resources left behind"
    assert all("removed_at" in resource for resource in record["resources"])
    assert pipeline.slots() == {"holders": {}, "queue": []}
    assert "teardown" in record["phases"] or not record.get("settings")
    summary = pipeline.object_json(f"runs/{run_id}/summary.json")
    assert summary["status"] == status
    return record
