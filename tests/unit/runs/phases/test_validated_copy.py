"""Every backend trains and evaluates on exactly the bytes Validate checked (issue 38 item 2): an upload over the
dataset's key or the ``eval_dataset`` key after Validate — or during it, for an event that names no version — does not
change what any backend's reader gets. The real phases run on moto DynamoDB and S3; each backend's own reader is then
pointed at the URIs its adapter is given."""

from __future__ import annotations

import json
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest

from mtrl.backends._aws import S3Uri
from mtrl.backends.local import LocalAdapter
from mtrl.backends.serverless.documents import service_rows
from mtrl.backends.sessions.runner import RunStore, SessionsRunner
from mtrl.backends.verl.train import _dataset_rows
from mtrl.contracts.backend import Finding, RunContext
from mtrl.contracts.errors import DatasetInvalid
from mtrl.runs import adapters
from mtrl.runs.phases.inputs import validated_keys
from mtrl.runs.phases.provision import preflight
from mtrl.runs.phases.register import register
from mtrl.runs.phases.slot import acquire_slot
from mtrl.runs.phases.validate import validate
from mtrl.runs.runtime import Runtime
from mtrl.settings.pipeline import PipelineSettings
from tests.aws_fixtures import create_versioned_bucket
from tests.run_table import create_run_table

BUCKET = "data"
DEPLOY = {"region": "us-east-1", "prefix": "mtrl", "subnets": ["subnet-1", "subnet-2"]}
EVAL_KEY = "eval-data/held-out.jsonl"


@dataclass
class Recorder:
    name: str = "local"
    seen: list[RunContext] = field(default_factory=list)

    def preflight(self, run: RunContext) -> list[Finding]:
        self.seen.append(run)
        return [Finding("ok", True, "fine")]


def rows(answers: list[str], tag: str) -> bytes:
    return "".join(
        json.dumps(
            {
                "id": f"{tag}-{i}",
                "metadata": {"prompt": [{"role": "user", "content": f"{tag} game {i}"}], "answer": a, "task": "wordle"},
            }
        )
        + "\n"
        for i, a in enumerate(answers)
    ).encode()


VALIDATED = rows(["crane", "slate", "pious", "mango"] * 3, "good")
HELD_OUT = rows(["crane", "slate"], "held")
SWAPPED = rows(["zzzzz"] * 12, "swapped")  # valid too: nothing but the version tells it apart


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
        backend_settings={"local": dict(DEPLOY)},
    )
    recorder = Recorder()
    adapters.register_adapter("local", lambda: recorder)  # type: ignore[arg-type,return-value]
    try:
        yield runtime, recorder
    finally:
        adapters.unregister_adapter("local")


def start(runtime: Runtime, run_id: str, manifest: dict[str, Any], *, named_version: bool = True) -> str:
    key = f"training-data/{run_id}.jsonl"
    version = runtime.s3.put_object(Bucket=BUCKET, Key=key, Body=VALIDATED)["VersionId"]
    state: dict[str, Any] = {
        "bucket": BUCKET,
        "key": key,
        "version_id": version if named_version else None,
        "created_at": "2026-12-02T01:00:00Z",
        "manifest": manifest,
    }
    register(runtime, {"run_id": run_id, "execution_arn": f"arn:{run_id}", "state": state})
    assert acquire_slot(runtime, {"run_id": run_id})["acquired"] is True
    return key


def games(body: bytes) -> list[str]:
    """Each row's first prompt (``good game 3``): what names the upload it came from."""
    return [game(json.loads(line)["metadata"]) for line in body.splitlines()]


def game(task: dict[str, Any]) -> str:
    return str(task["prompt"][0]["content"])


# Each backend's own reader of the dataset URI its adapter is given → the games it trains on.
Reader = Callable[[Any, RunContext, str], list[str]]


def local_reader(s3: Any, run: RunContext, uri: str) -> list[str]:
    return [game(task) for task in LocalAdapter()._read_rows(run, uri)]


def verl_reader(s3: Any, run: RunContext, uri: str) -> list[str]:
    rows = _dataset_rows({"environment": "wordle", "run_id": run.run_id}, s3, uri)
    return [game(json.loads(row["extra_info"]["task_json"])) for row in rows]


def serverless_reader(s3: Any, run: RunContext, uri: str) -> list[str]:
    return [game(json.loads(row["prompt"])) for row in service_rows(s3, S3Uri.parse(uri))]


def sessions_reader(s3: Any, run: RunContext, uri: str) -> list[str]:
    runner = types.SimpleNamespace(store=RunStore(s3, run.output_uri))
    version = run.settings.get("dataset_version_id")  # the upload's version, as the sessions adapter passes it
    return [game(task) for task in SessionsRunner._tasks(runner, uri, version).values()]  # type: ignore[arg-type]


def hyperpod_reader(s3: Any, run: RunContext, uri: str) -> list[str]:
    # The Nova job is given the S3 path itself (runner_tasks: training_data_s3_path) and reads the object there.
    location = S3Uri.parse(uri)
    return games(s3.get_object(Bucket=location.bucket, Key=location.key)["Body"].read())


READERS: dict[str, Reader] = {
    "local": local_reader,
    "verl": verl_reader,
    "serverless": serverless_reader,
    "sessions": sessions_reader,
    "hyperpod": hyperpod_reader,
}


@pytest.mark.parametrize("backend", list(READERS))
def test_an_upload_over_the_key_after_validate_changes_nothing_a_backend_reads(
    backend: str, world: tuple[Runtime, Recorder]
) -> None:
    runtime, recorder = world
    runtime.s3.put_object(Bucket=BUCKET, Key=EVAL_KEY, Body=HELD_OUT)
    key = start(runtime, "r1", {"eval_dataset": EVAL_KEY})
    validate(runtime, {"run_id": "r1"})
    runtime.s3.put_object(Bucket=BUCKET, Key=key, Body=SWAPPED)  # both uploads are replaced after Validate
    runtime.s3.put_object(Bucket=BUCKET, Key=EVAL_KEY, Body=SWAPPED)
    preflight(runtime, {"run_id": "r1"})
    (run,) = recorder.seen
    read = READERS[backend]
    assert read(runtime.s3, run, run.dataset_uri) == games(VALIDATED)
    assert run.eval_dataset_uri is not None
    assert read(runtime.s3, run, run.eval_dataset_uri) == games(HELD_OUT)
    # The copies under the run's own prefix, which only the pipeline writes.
    assert (run.dataset_uri, run.eval_dataset_uri) == tuple(f"s3://{BUCKET}/{k}" for k in validated_keys("r1"))


class SwapAfterRead:
    """The moto client, except that the upload is replaced right after its first read (an upload racing Validate)."""

    def __init__(self, client: Any, key: str) -> None:
        self._client, self._key, self._swapped = client, key, False

    def get_object(self, **request: Any) -> Any:
        response = self._client.get_object(**request)
        if request["Key"] == self._key and not self._swapped:
            self._swapped = True
            self._client.put_object(Bucket=BUCKET, Key=self._key, Body=SWAPPED)
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


@pytest.mark.parametrize("manifest", [{}, {"eval_split": 0.25}], ids=["whole file", "eval_split"])
def test_an_upload_during_validate_of_an_event_without_a_version_changes_nothing(
    manifest: dict[str, Any], world: tuple[Runtime, Recorder]
) -> None:
    runtime, recorder = world
    key = start(runtime, "r2", manifest, named_version=False)
    runtime.s3 = SwapAfterRead(runtime.s3, key)
    validate(runtime, {"run_id": "r2"})
    preflight(runtime, {"run_id": "r2"})
    (run,) = recorder.seen
    read = [*serverless_reader(runtime.s3, run, run.dataset_uri)]
    if run.eval_dataset_uri:
        read += serverless_reader(runtime.s3, run, run.eval_dataset_uri)
    assert sorted(read) == sorted(games(VALIDATED))


def test_an_invalid_dataset_leaves_no_copy(world: tuple[Runtime, Recorder]) -> None:
    runtime, _ = world
    key = start(runtime, "bad", {})
    runtime.s3.put_object(Bucket=BUCKET, Key=key, Body=VALIDATED + b"not json\n")
    runtime.registry.update("bad", lambda item: item["dataset"].update(version_id=None))
    with pytest.raises(DatasetInvalid, match="run bad"):
        validate(runtime, {"run_id": "bad"})
    listed = runtime.s3.list_objects_v2(Bucket=BUCKET, Prefix="runs/bad/data/")
    assert listed.get("KeyCount", 0) == 0


def test_validate_records_the_longest_prompts_with_their_lines(world: tuple[Runtime, Recorder]) -> None:
    # What the backend's Preflight compares with the run's prompt length (issue 38 item 5).
    runtime, _ = world
    key = start(runtime, "r3", {})
    long_row = json.dumps({"id": "long", "metadata": {"prompt": "w " * 3000, "answer": "crane", "task": "wordle"}})
    body = VALIDATED + long_row.encode() + b"\n"
    version = runtime.s3.put_object(Bucket=BUCKET, Key=key, Body=body)["VersionId"]
    runtime.registry.update("r3", lambda item: item["dataset"].update(version_id=version))
    validate(runtime, {"run_id": "r3"})
    document = json.loads(runtime.s3.get_object(Bucket=BUCKET, Key="runs/r3/validation.json")["Body"].read())
    assert document["train"]["longest_prompts"][0] == {"line": 13, "tokens_at_least": 3000}
