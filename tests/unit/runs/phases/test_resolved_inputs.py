"""A run's resolved inputs are written once (data URIs at Validate, effective settings at Preflight) and every later
phase gives the adapter exactly those: the real phases on moto DynamoDB and S3, with a recording adapter."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest

from mtrl.contracts.backend import CreatedResource, Finding, JobState, JobStatus, RunContext
from mtrl.contracts.errors import ConfigurationError, InternalError, TeardownIncomplete
from mtrl.health.signals import SignalHeader, SignalRow, render_signals
from mtrl.runs import adapters
from mtrl.runs.health_poll import signals_key
from mtrl.runs.manifest import RunSettings
from mtrl.runs.phases.inputs import INPUTS_FIELD, stored_inputs
from mtrl.runs.phases.provision import preflight, provision
from mtrl.runs.phases.register import register
from mtrl.runs.phases.slot import acquire_slot
from mtrl.runs.phases.teardown import teardown
from mtrl.runs.phases.train import check_status, submit
from mtrl.runs.phases.validate import split_keys, validate
from mtrl.runs.runtime import Runtime
from mtrl.settings.pipeline import PipelineSettings
from tests.aws_fixtures import create_versioned_bucket
from tests.run_table import create_run_table

BUCKET = "data"
DEPLOY = {"region": "us-east-1", "prefix": "mtrl", "ratio": 1.0, "subnets": ["subnet-1", "subnet-2"]}


@dataclass
class Recorder:
    """A backend that records each context it is given."""

    name: str = "local"
    seen: list[tuple[str, RunContext]] = field(default_factory=list)

    def preflight(self, run: RunContext) -> list[Finding]:
        self.seen.append(("preflight", run))
        return [Finding("ok", True, "fine")]

    def provision(self, run: RunContext) -> list[Any]:
        self.seen.append(("provision", run))
        return []

    def submit(self, run: RunContext) -> str:
        self.seen.append(("submit", run))
        return "job-1"

    def status(self, run: RunContext, job_id: str) -> JobStatus:
        self.seen.append(("status", run))
        return JobStatus(state=JobState.RUNNING)

    def cancel(self, run: RunContext, job_id: str) -> None:
        self.seen.append(("cancel", run))

    def cleanup(self, run: RunContext) -> None:
        self.seen.append(("cleanup", run))


def wordle_rows(count: int) -> bytes:
    words = ["crane", "slate", "pious", "mango"]
    rows = [
        {
            "id": f"w-{i:05d}",
            "metadata": {
                "prompt": [{"role": "user", "content": f"Game {i}: make your first guess."}],
                "answer": words[i % len(words)],
                "task": "wordle",
            },
        }
        for i in range(count)
    ]
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


@pytest.fixture
def world(mocked_aws: None) -> Iterator[tuple[Runtime, Recorder]]:
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    create_run_table(dynamodb, "runs")
    s3 = boto3.client("s3", region_name="us-east-1")
    create_versioned_bucket(s3, BUCKET)
    runtime = Runtime(
        dynamodb=dynamodb,
        s3=s3,
        table="runs",
        bucket=BUCKET,
        settings=PipelineSettings.model_validate({"run_backend": "local"}),
        backend_settings={"local": dict(DEPLOY)},  # the run's backend's section
    )
    recorder = Recorder()
    adapters.register_adapter("local", lambda: recorder)  # type: ignore[arg-type,return-value]
    try:
        yield runtime, recorder
    finally:
        adapters.unregister_adapter("local")


def start(runtime: Runtime, run_id: str, manifest: dict[str, Any] | None = None) -> None:
    """Register, take the slot and validate a fresh upload (the phases before the backend's)."""
    key = f"training-data/{run_id}.jsonl"
    version = runtime.s3.put_object(Bucket=BUCKET, Key=key, Body=wordle_rows(8))["VersionId"]
    state: dict[str, Any] = {"bucket": BUCKET, "key": key, "version_id": version, "created_at": "2026-12-02T01:00:00Z"}
    if manifest is not None:
        state["manifest"] = manifest
    register(runtime, {"run_id": run_id, "execution_arn": f"arn:{run_id}", "state": state})
    assert acquire_slot(runtime, {"run_id": run_id})["acquired"] is True
    validate(runtime, {"run_id": run_id})


def test_validate_stores_the_data_uris_and_preflight_the_effective_settings_once(
    world: tuple[Runtime, Recorder],
) -> None:
    runtime, recorder = world
    start(runtime, "r1", {"eval_split": 0.25})
    after_validate = runtime.registry.get("r1")[INPUTS_FIELD]
    train_key, eval_key = split_keys("r1")
    assert after_validate == {
        "dataset_uri": f"s3://{BUCKET}/{train_key}",
        "eval_dataset_uri": f"s3://{BUCKET}/{eval_key}",
        "output_uri": f"s3://{BUCKET}/runs/r1/",
    }
    preflight(runtime, {"run_id": "r1"})
    stored = runtime.registry.get("r1")[INPUTS_FIELD]
    settings = json.loads(stored["settings_json"])
    assert {key: settings[key] for key in DEPLOY} == DEPLOY
    assert isinstance(settings["ratio"], float)  # JSON text keeps 1.0 a float (a DynamoDB number would not)
    assert (settings["run_id"], settings["eval_split"], settings["backend"]) == ("r1", 0.25, "local")
    (phase, context) = recorder.seen[-1]
    assert phase == "preflight"
    assert dict(context.settings) == settings
    assert isinstance(context.settings["ratio"], float)
    assert (context.dataset_uri, context.eval_dataset_uri) == (stored["dataset_uri"], stored["eval_dataset_uri"])


def test_later_phases_read_the_stored_inputs_and_never_re_derive_them(world: tuple[Runtime, Recorder]) -> None:
    runtime, recorder = world
    start(runtime, "r2", {"eval_split": 0.25})
    preflight(runtime, {"run_id": "r2"})
    stored = runtime.registry.get("r2")[INPUTS_FIELD]
    # Everything the inputs were derived from changes afterwards: a redeploy's backend settings, the record's dataset,
    # its validation summary. The adapter must still see what Validate and Preflight resolved.
    runtime.backend_settings = {"local": {"region": "eu-west-1", "prefix": "other"}}
    runtime.registry.set_fields(
        "r2", dataset={"bucket": "elsewhere", "key": "training-data/other.jsonl"}, validation={"valid": True}
    )
    assert provision(runtime, {"run_id": "r2"})["ready"] is True
    submit(runtime, {"run_id": "r2"})
    check_status(runtime, {"run_id": "r2"})
    later = [context for phase, context in recorder.seen if phase in {"provision", "submit", "status"}]
    assert [phase for phase, _ in recorder.seen] == ["preflight", "provision", "submit", "status"]
    for context in later:
        assert dict(context.settings) == json.loads(stored["settings_json"])
        assert context.settings["region"] == "us-east-1"
        assert context.dataset_uri == stored["dataset_uri"]
        assert context.eval_dataset_uri == stored["eval_dataset_uri"]
        assert context.output_uri == stored["output_uri"]


def test_a_retried_preflight_keeps_the_settings_the_first_one_stored(world: tuple[Runtime, Recorder]) -> None:
    runtime, _ = world
    start(runtime, "r3")
    preflight(runtime, {"run_id": "r3"})
    first = runtime.registry.get("r3")[INPUTS_FIELD]
    runtime.backend_settings = {"local": {**DEPLOY, "prefix": "redeployed"}}
    preflight(runtime, {"run_id": "r3"})
    assert runtime.registry.get("r3")[INPUTS_FIELD] == first


def test_an_invalid_dataset_stores_no_inputs(world: tuple[Runtime, Recorder]) -> None:
    runtime, _ = world
    key = "training-data/bad.jsonl"
    version = runtime.s3.put_object(Bucket=BUCKET, Key=key, Body=b"not json\n")["VersionId"]
    state = {"bucket": BUCKET, "key": key, "version_id": version, "created_at": "2026-12-02T01:00:00Z"}
    register(runtime, {"run_id": "bad", "execution_arn": "arn:bad", "state": state})
    acquire_slot(runtime, {"run_id": "bad"})
    with pytest.raises(Exception, match="run bad"):
        validate(runtime, {"run_id": "bad"})
    assert INPUTS_FIELD not in runtime.registry.get("bad")


def test_a_record_without_inputs_is_an_internal_error_naming_the_run(world: tuple[Runtime, Recorder]) -> None:
    # Validate stores the inputs before any backend phase runs; a record without them (written by a release before
    # the inputs were stored: CHANGELOG.md) is refused, never resolved again.
    runtime, recorder = world
    start(runtime, "r5")
    runtime.registry.update("r5", lambda item: item.pop(INPUTS_FIELD))
    with pytest.raises(InternalError, match="run r5: the record has no resolved inputs"):
        preflight(runtime, {"run_id": "r5"})
    assert recorder.seen == []


def test_teardown_of_a_record_without_inputs_is_incomplete_not_an_internal_error(
    world: tuple[Runtime, Recorder],
) -> None:
    # A run of the release before that crossed the upgrade holding resources: its teardown says what it could not do.
    runtime, recorder = world
    start(runtime, "r8")
    runtime.registry.record_resource("r8", CreatedResource("svc", "s1", {}))
    runtime.registry.update("r8", lambda item: item.pop(INPUTS_FIELD))
    with pytest.raises(TeardownIncomplete, match=r"run r8: .*the record has no resolved inputs"):
        teardown(runtime, {"run_id": "r8"})
    assert recorder.seen == []


@pytest.mark.parametrize(
    "stored",
    [
        {"dataset_uri": "s3://data/x.jsonl"},
        {"dataset_uri": "s3://data/x.jsonl", "output_uri": "s3://data/runs/r/", "settings_json": "[1]"},
        {"dataset_uri": "s3://data/x.jsonl", "output_uri": "s3://data/runs/r/", "settings_json": "{"},
    ],
)
def test_unreadable_stored_inputs_are_an_internal_error_naming_the_run(stored: dict[str, Any]) -> None:
    record = {"run_id": "broken-1", INPUTS_FIELD: stored}
    with pytest.raises(InternalError, match="run broken-1: the record's resolved inputs are unreadable"):
        stored_inputs("broken-1", record)


def test_settings_the_adapter_cannot_be_given_fail_preflight_as_before(world: tuple[Runtime, Recorder]) -> None:
    runtime, recorder = world
    start(runtime, "r6")
    settings = runtime.registry.get("r6")["settings"]
    runtime.registry.set_fields("r6", settings={**settings, "backend_options": {"region": "eu-west-1"}})
    with pytest.raises(ConfigurationError, match="run r6: "):
        preflight(runtime, {"run_id": "r6"})
    assert recorder.seen == []
    assert "settings_json" not in runtime.registry.get("r6")[INPUTS_FIELD]


class CountingDynamoDB:
    """The moto client, counting the run-record reads (GetItem) a phase makes."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.get_items = 0

    def get_item(self, **request: Any) -> Any:
        self.get_items += 1
        return self._client.get_item(**request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def _reads_of(runtime: Runtime, monkeypatch: pytest.MonkeyPatch, phase: Any, event: dict[str, Any]) -> tuple[int, int]:
    """(RunSettings validations, GetItem calls) one invocation of ``phase`` makes, on a fresh registry."""
    validations = []
    original = RunSettings.model_validate.__func__  # type: ignore[attr-defined]

    def counted(cls: type[RunSettings], *args: Any, **kwargs: Any) -> RunSettings:
        validations.append(1)
        return original(cls, *args, **kwargs)  # type: ignore[no-any-return]

    counting = CountingDynamoDB(runtime.dynamodb)
    invocation = dataclasses.replace(runtime, dynamodb=counting)  # one Lambda invocation: its own registry
    with monkeypatch.context() as patch:
        patch.setattr(RunSettings, "model_validate", classmethod(counted))
        phase(invocation, event)
    return len(validations), counting.get_items


def test_a_status_poll_reads_the_run_and_validates_its_settings_once(
    world: tuple[Runtime, Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime, recorder = world
    start(runtime, "r7", {"max_budget_usd": 50, "early_stop": True})
    for phase in (preflight, provision, submit):
        phase(runtime, {"run_id": "r7"})
    # A poll without signal rows yet, then one with rows (health rules evaluated, early_stop consulted): each
    # reads the record once and validates its settings once (the release before read them up to three times).
    assert _reads_of(runtime, monkeypatch, check_status, {"run_id": "r7"}) == (1, 1)
    rows = [SignalRow(step=step, zero_spread_share=0.0) for step in (1, 2)]
    runtime.s3.put_object(
        Bucket=BUCKET, Key=signals_key("r7"), Body=render_signals(SignalHeader(planned_steps=30), rows).encode()
    )
    assert _reads_of(runtime, monkeypatch, check_status, {"run_id": "r7"}) == (1, 1)
    assert runtime.registry.get("r7")["health"]["last_step"] == 2
    assert [phase for phase, _ in recorder.seen][-2:] == ["status", "status"]
