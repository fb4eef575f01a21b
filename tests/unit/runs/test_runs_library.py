"""Run ids, manifests, the run registry and the concurrency slots (DynamoDB via moto)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from mtrl.contracts.backend import CreatedResource
from mtrl.contracts.errors import ConfigurationError, in_plain_words
from mtrl.runs.ids import RUN_ID_PATTERN, dataset_stem, derive_run_id, manifest_key_for
from mtrl.runs.manifest import parse_manifest, resolve_run_settings
from mtrl.runs.registry import RunRegistry, RunStatus
from mtrl.runs.report import build_summary, cause_text, notification
from mtrl.runs.slots import SlotPool
from mtrl.settings.pipeline import PipelineSettings
from tests.run_table import create_run_table

WHEN = datetime(2026, 11, 29, 10, 30, 5, tzinfo=UTC)
DEFAULTS = PipelineSettings.model_validate({})


# -- run ids ----------------------------------------------------------------------------------------------
def test_run_id_is_deterministic_readable_and_a_valid_execution_name() -> None:
    run_id = derive_run_id(bucket="b", key="training-data/Wordle Train v2.jsonl", version_id="v1", created=WHEN)
    assert run_id == derive_run_id(bucket="b", key="training-data/Wordle Train v2.jsonl", version_id="v1", created=WHEN)
    assert run_id.startswith("wordle-train-v2-20261129T103005Z-")
    assert RUN_ID_PATTERN.match(run_id)
    other_version = derive_run_id(bucket="b", key="training-data/Wordle Train v2.jsonl", version_id="v2", created=WHEN)
    assert other_version != run_id
    long_key = "training-data/" + "x" * 300 + ".jsonl"
    assert len(derive_run_id(bucket="b", key=long_key, version_id="v", created=WHEN)) <= 80
    with pytest.raises(ValueError, match="timezone"):
        derive_run_id(bucket="b", key="k", version_id=None, created=WHEN.replace(tzinfo=None))


def test_stems_and_manifest_keys() -> None:
    assert dataset_stem("training-data/a/b/My_Data.jsonl") == "my-data"
    assert dataset_stem("training-data/%%%.jsonl") == "dataset"
    assert manifest_key_for("training-data/a.jsonl") == "training-data/a.run.json"


# -- manifests --------------------------------------------------------------------------------------------
def test_manifest_overrides_defaults() -> None:
    settings = resolve_run_settings(DEFAULTS, {"instance_count": 4, "hyperparameters": {"learning_rate": 0.1}})
    assert settings.instance_count == 4
    assert settings.backend == DEFAULTS.run_backend
    assert settings.run_timeout_minutes == DEFAULTS.run_timeout_minutes
    assert not settings.evaluate
    assert resolve_run_settings(DEFAULTS, None).environment == "wordle"


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ({"instance_cont": 2}, "key 'instance_cont': unknown setting"),
        ({"backend": "tpu"}, "key 'backend'"),
        ({"eval_split": 0.9}, "key 'eval_split'"),
        ({"eval_dataset": "eval-data/x.csv"}, "must be a .jsonl"),
        ({"eval_dataset": "training-data/x.jsonl"}, "under eval-data/"),
        ({"eval_dataset": "eval-data/x.jsonl", "eval_split": 0.1}, "either eval_split or eval_dataset"),
        ({"hyperparameters": {"bad name": 1}}, "letters, digits"),
        ({"environment": "Wordle!"}, "key 'environment'"),
    ],
)
def test_bad_manifests_name_the_key(manifest: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match="manifest") as raised:
        resolve_run_settings(DEFAULTS, manifest, source="manifest s3://b/k.run.json")
    assert message in str(raised.value)


def test_runs_must_fit_in_one_execution_history() -> None:
    with pytest.raises(ConfigurationError, match=r"run_timeout_minutes'.*3786 polls; one execution allows 2500"):
        resolve_run_settings(DEFAULTS, {"run_timeout_minutes": 7 * 24 * 60})
    with pytest.raises(ValueError, match="status_poll_seconds"):
        PipelineSettings.model_validate({"slot_poll_seconds": 5})


def test_manifest_parsing() -> None:
    assert parse_manifest('{"instance_count": 2}', source="m") == {"instance_count": 2}
    with pytest.raises(ConfigurationError, match="not valid JSON"):
        parse_manifest("{", source="m")
    with pytest.raises(ConfigurationError, match="JSON object"):
        parse_manifest("[1]", source="m")


# -- registry and slots ---------------------------------------------------------------------------------------
@pytest.fixture
def dynamodb(mocked_aws: None) -> Any:
    client = boto3.client("dynamodb", region_name="us-east-1")
    create_run_table(client, "runs")
    return client


def test_registry_create_is_conditional(dynamodb: Any) -> None:
    registry = RunRegistry(dynamodb, "runs")
    _record, created = registry.create("r1", {"dataset": {"uri": "s3://b/k"}, "settings": {"eval_split": 0.1}})
    assert created
    again, created_again = registry.create("r1", {"dataset": {"uri": "s3://other"}})
    assert not created_again
    assert again["dataset"] == {"uri": "s3://b/k"}
    assert again["settings"] == {"eval_split": 0.1}  # floats survive the Decimal round trip


def test_registry_status_phases_resources_and_finality(dynamodb: Any) -> None:
    registry = RunRegistry(dynamodb, "runs")
    registry.create("r1", {})
    registry.set_status("r1", RunStatus.VALIDATING, phase="validate")
    registry.end_phase("r1", "validate", rows=3)
    resource = CreatedResource("ecs-service", "svc-1", {"cluster": "c"})
    registry.record_resource("r1", resource)
    registry.record_resource("r1", resource)  # idempotent
    registry.mark_removed("r1", [resource])
    record = registry.finish("r1", RunStatus.FAILED, error={"step": "Validate"})
    assert record["status"] == "FAILED"
    assert record["phases"]["validate"]["rows"] == 3
    assert record["phases"]["validate"]["started_at"] <= record["phases"]["validate"]["ended_at"]
    assert len(record["resources"]) == 1
    assert "removed_at" in record["resources"][0]
    # A final status is final.
    assert registry.finish("r1", RunStatus.SUCCEEDED)["status"] == "FAILED"
    assert registry.set_status("r1", RunStatus.TRAINING)["status"] == "FAILED"
    assert registry.claim_notification("r1") is True
    assert registry.claim_notification("r1") is False


def test_concurrent_updates_are_never_lost(dynamodb: Any) -> None:
    registry = RunRegistry(dynamodb, "runs")
    registry.create("r1", {})
    lock = threading.Lock()  # moto's own check-then-write is not atomic; DynamoDB's is

    original = dynamodb.put_item

    def atomic_put(**kwargs: Any) -> Any:
        with lock:
            return original(**kwargs)

    dynamodb.put_item = atomic_put

    def add(index: int) -> None:
        registry.record_resource("r1", CreatedResource("thing", f"t{index}"))

    threads = [threading.Thread(target=add, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r["identifier"] for r in registry.get("r1")["resources"]) == [f"t{i}" for i in range(6)]


class CountingClient:
    """The DynamoDB client, counting the calls made through it."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)

        def counted(**kwargs: Any) -> Any:
            self.calls.append(name)
            return method(**kwargs)

        return counted


def test_a_phases_consecutive_updates_read_the_record_only_when_it_moved(dynamodb: Any) -> None:
    counting = CountingClient(dynamodb)
    registry = RunRegistry(counting, "runs")
    registry.create("r1", {})
    registry.set_status("r1", RunStatus.VALIDATING, phase="validate")
    registry.set_fields("r1", rows=3)
    registry.end_phase("r1", "validate")
    assert counting.calls == ["put_item"] * 4  # each update wrote against the version the last one wrote
    stored = RunRegistry(dynamodb, "runs").get("r1")
    assert stored["version"] == 4
    assert stored["rows"] == 3
    assert stored["status"] == "VALIDATING"
    assert "ended_at" in stored["phases"]["validate"]


def test_an_update_over_another_writers_change_keeps_both(dynamodb: Any) -> None:
    counting = CountingClient(dynamodb)
    mine, theirs = RunRegistry(counting, "runs"), RunRegistry(dynamodb, "runs")
    mine.create("r1", {})
    mine.set_fields("r1", mine_first=1)
    theirs.set_fields("r1", theirs_between=2)  # the version mine last wrote is now stale
    counting.calls.clear()
    record = mine.set_fields("r1", mine_after=3)
    assert counting.calls == ["put_item", "get_item", "put_item"]  # refused by the version condition, read, written
    assert (record["mine_first"], record["theirs_between"], record["mine_after"]) == (1, 2, 3)
    assert RunRegistry(dynamodb, "runs").get("r1") == record


def test_nothing_to_write_is_only_ever_decided_on_a_fresh_read(dynamodb: Any) -> None:
    mine, theirs = RunRegistry(dynamodb, "runs"), RunRegistry(dynamodb, "runs")
    mine.create("r1", {})
    mine.set_fields("r1", blocked=True)
    theirs.set_fields("r1", blocked=False)

    def unless_blocked(record: dict[str, Any]) -> bool:
        if record["blocked"]:
            return False  # what mine last saw, but no longer true
        record["done"] = True
        return True

    assert mine.update("r1", unless_blocked)["done"] is True
    assert RunRegistry(dynamodb, "runs").get("r1")["done"] is True


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def pool(dynamodb: Any, clock: Clock, capacity: int = 1) -> SlotPool:
    return SlotPool(dynamodb, "runs", capacity=capacity, lease_seconds=600, stale_after_seconds=300, clock=clock)


def test_slots_first_come_first_served(dynamodb: Any) -> None:
    clock = Clock()
    slots = pool(dynamodb, clock)
    for run, arrival in (("b", "2026-01-01T00:00:02Z"), ("a", "2026-01-01T00:00:01Z"), ("c", "2026-01-01T00:00:03Z")):
        slots.enqueue(run, arrival)
    slots.enqueue("a", "2026-01-01T00:00:01Z")  # idempotent
    assert slots.try_acquire("b").acquired is False  # "a" arrived first
    assert slots.try_acquire("b").position == 1
    assert slots.try_acquire("a").acquired is True
    assert slots.try_acquire("a").acquired is True  # holding it already
    assert slots.try_acquire("b").acquired is False
    assert slots.release("a") is True
    assert slots.release("a") is False  # idempotent
    assert slots.try_acquire("c").acquired is False  # "b" is next
    assert slots.try_acquire("b").acquired is True
    assert slots.snapshot() == {"holders": {0: "b"}, "queue": ["c"]}


def test_capacity_two(dynamodb: Any) -> None:
    slots = pool(dynamodb, Clock(), capacity=2)
    for index, run in enumerate("xyz"):
        slots.enqueue(run, f"t{index}")
    assert slots.try_acquire("y").acquired  # two free slots: the second in line may go
    assert slots.try_acquire("z").acquired is False
    assert slots.try_acquire("x").acquired
    assert sorted(slots.snapshot()["holders"].values()) == ["x", "y"]


def test_a_crashed_holder_loses_its_slot_when_the_lease_runs_out(dynamodb: Any) -> None:
    clock = Clock()
    slots = pool(dynamodb, clock)
    slots.enqueue("crashed", "t1")
    slots.enqueue("next", "t2")
    assert slots.try_acquire("crashed").acquired
    clock.now += 200
    assert slots.renew("crashed")  # alive: lease extended to now + 600
    clock.now += 500
    assert slots.try_acquire("next").acquired is False
    clock.now += 200  # no renewal for 700 s > lease
    assert slots.try_acquire("next").acquired is True
    assert slots.renew("crashed") is False


def test_a_dead_waiter_does_not_block_the_queue(dynamodb: Any) -> None:
    clock = Clock()
    slots = pool(dynamodb, clock)
    slots.enqueue("holder", "t0")
    slots.enqueue("ghost", "t1")
    slots.enqueue("alive", "t2")
    assert slots.try_acquire("holder").acquired
    assert slots.try_acquire("ghost").acquired is False
    clock.now += 400  # ghost stops polling; alive keeps going
    slots.release("holder")
    assert slots.try_acquire("alive").acquired is True
    assert slots.snapshot()["queue"] == []


# -- report ------------------------------------------------------------------------------------------------------
def test_cause_text_unwraps_lambda_errors() -> None:
    assert cause_text('{"errorType": "X", "errorMessage": "run r1: boom"}') == "run r1: boom"
    assert cause_text("plain") == "plain"
    assert cause_text(None) == ""


def test_failure_notification_names_step_and_cause() -> None:
    start = WHEN.isoformat().replace("+00:00", "Z")
    end = (WHEN + timedelta(seconds=90)).isoformat().replace("+00:00", "Z")
    record = {
        "run_id": "r1",
        "status": "FAILED",
        "created_at": start,
        "finished_at": end,
        "dataset": {"uri": "s3://b/training-data/x.jsonl", "version_id": "v1"},
        "phases": {"validate": {"started_at": start, "ended_at": end}},
        "resources": [{"kind": "svc", "identifier": "s1"}],
        "error": {"step": "Validate", "error": "DatasetInvalid", "cause": "run r1: line 3: missing 'id'"},
        "validation": {"report_uri": "s3://b/runs/r1/validation.json"},
    }
    summary = build_summary(record, bucket="b")
    assert summary["phases"]["validate"]["seconds"] == 90
    subject, body = notification(summary)
    assert subject == "mtrl run failed at Validate: r1"
    assert "What happened: the dataset is invalid." in body
    assert "line 3: missing 'id'" in body
    assert "WARNING: teardown could not remove: svc s1" in body
    assert "s3://b/runs/r1/validation.json" in body
    assert in_plain_words("Nope") == "the step failed with Nope"


# -- adapter factory ------------------------------------------------------------------------------------------
def test_adapter_factory() -> None:
    from mtrl.backends.serverless.adapter import ServerlessAdapter
    from mtrl.runs import adapters

    assert isinstance(adapters.adapter_for("serverless"), ServerlessAdapter)
    with pytest.raises(ConfigurationError, match="unknown backend 'tpu'"):
        adapters.adapter_for("tpu")
    sentinel = object()
    adapters.register_adapter("serverless", lambda: sentinel)  # type: ignore[arg-type,return-value]
    try:
        assert adapters.adapter_for("serverless") is sentinel
    finally:
        adapters.unregister_adapter("serverless")
    assert isinstance(adapters.adapter_for("serverless"), ServerlessAdapter)


def test_a_retried_submit_never_submits_twice(dynamodb: Any) -> None:
    from mtrl.contracts.backend import JobStatus
    from mtrl.runs import adapters, pipeline
    from mtrl.runs.runtime import Runtime

    submitted: list[str] = []

    class Backend:
        name = "local"

        def submit(self, run: Any) -> str:
            submitted.append(run.run_id)
            return "job-1"

        def status(self, run: Any, job_id: str) -> JobStatus:
            raise AssertionError("not polled here")

    runtime = Runtime(dynamodb=dynamodb, s3=None, table="runs", bucket="b", settings=DEFAULTS)
    runtime.registry.create(
        "r1",
        {
            "settings": resolve_run_settings(DEFAULTS, {"backend": "local"}).model_dump(mode="json"),
            "dataset": {"bucket": "b", "key": "training-data/x.jsonl", "version_id": "v"},
            # What Validate and Preflight stored.
            "inputs": {
                "dataset_uri": "s3://b/training-data/x.jsonl",
                "eval_dataset_uri": None,
                "output_uri": "s3://b/runs/r1/",
                "settings_json": '{"run_id": "r1", "backend": "local"}',
            },
        },
    )
    adapters.register_adapter("local", Backend)  # type: ignore[arg-type]
    try:
        assert pipeline.submit(runtime, {"run_id": "r1"}) == {"job_id": "job-1"}
        assert pipeline.submit(runtime, {"run_id": "r1"}) == {"job_id": "job-1"}
    finally:
        adapters.unregister_adapter("local")
    assert submitted == ["r1"]
    record = runtime.registry.get("r1")
    assert record["status"] == "TRAINING"
    assert record["deadline"] > record["created_at"]
