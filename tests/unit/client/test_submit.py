"""`mtrl submit`: local validation first, manifest before dataset, the trigger's run id, --watch."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from mtrl.backends.verl.catalog import RegisteredImage, RegisteredModel, record_image, record_model
from mtrl.cli import app
from mtrl.client import submit as client_submit
from mtrl.client.deployment import Aws
from mtrl.client.runs import started_run_for_upload
from mtrl.runs import trigger
from mtrl.runs.registry import RunStatus
from mtrl.settings.verl import VerlModelSettings
from tests.unit.client.conftest import BUCKET, SAMPLE, Fake

runner = CliRunner()
MANIFEST = {"backend": "local", "environment": "wordle", "hyperparameters": {"steps": 2}}
Sleeper = Callable[[Callable[[], object]], list[int]]


def _dataset(tmp_path: Path, rows: int = 12, name: str = "wordle-mini.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:rows]))
    return path


def _manifest(tmp_path: Path, document: dict[str, Any] = MANIFEST) -> Path:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(document))
    return path


@pytest.fixture
def s3_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(operation, key) of every S3 call the command makes, in order (recorded at the client factory)."""
    calls: list[tuple[str, str]] = []
    original = Aws.client

    def client(self: Aws, service: str) -> Any:
        made = original(self, service)
        if service == "s3":

            def record(model: Any, params: dict[str, Any], **_: Any) -> None:
                calls.append((model.name, str(params.get("Key", ""))))

            made.meta.events.register("provide-client-params.s3", record, unique_id="test-record")
        return made

    monkeypatch.setattr(Aws, "client", client)
    return calls


def _started_by_trigger(fake: Fake, key: str, version_id: str) -> dict[str, Any]:
    """Run the real trigger on the upload event, as EventBridge would deliver it."""
    event = {"detail": {"bucket": {"name": BUCKET}, "object": {"key": key, "version-id": version_id}}}
    return trigger.handle_upload(fake.runtime(), event)


def test_submit_uploads_manifest_then_dataset_and_prints_the_triggers_run_id(
    fake: Fake, tmp_path: Path, s3_calls: list[tuple[str, str]]
) -> None:
    result = runner.invoke(app, ["submit", str(_dataset(tmp_path)), "--manifest", str(_manifest(tmp_path)), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    key = "training-data/wordle-mini.jsonl"
    assert document["dataset_uri"] == f"s3://{BUCKET}/{key}"
    uploads = [(op, k) for op, k in s3_calls if op in {"PutObject", "CreateMultipartUpload"}]
    assert uploads == [("PutObject", "training-data/wordle-mini.run.json"), ("PutObject", key)]
    started = _started_by_trigger(fake, key, document["version_id"])
    assert started["status"] == "STARTED"
    assert started["run_id"] == document["run_id"]
    execution = fake.stepfunctions.describe_execution(executionArn=started["execution_arn"])
    assert json.loads(execution["input"])["manifest"] == MANIFEST


def test_a_reupload_is_a_new_run(fake: Fake, tmp_path: Path) -> None:
    dataset = _dataset(tmp_path)
    first = runner.invoke(app, ["submit", str(dataset), "--json"])
    second = runner.invoke(app, ["submit", str(dataset), "--json"])
    assert first.exit_code == second.exit_code == 0
    assert json.loads(first.stdout)["run_id"] != json.loads(second.stdout)["run_id"]


def test_invalid_data_is_refused_with_line_numbers_and_nothing_uploaded(fake: Fake, tmp_path: Path) -> None:
    dataset = _dataset(tmp_path, rows=4)
    lines = dataset.read_text().splitlines()
    lines[2] = '{"id": "broken", '
    dataset.write_text("\n".join(lines) + "\n")
    result = runner.invoke(app, ["submit", str(dataset), "--manifest", str(_manifest(tmp_path))])
    assert result.exit_code == 1
    assert f"{dataset}:line 3" in result.stderr
    assert "nothing was uploaded" in result.stderr
    assert "Versions" not in fake.s3.list_object_versions(Bucket=BUCKET)
    as_json = runner.invoke(app, ["submit", str(dataset), "--json"])
    assert as_json.exit_code == 1
    assert json.loads(as_json.stdout)["train"]["errors"][0]["line"] == 3


def test_invalid_data_is_refused_before_any_aws_call(aws_env: None, tmp_path: Path) -> None:
    dataset = tmp_path / "bad.jsonl"
    dataset.write_text("not json\n")
    result = runner.invoke(app, ["submit", str(dataset), "--endpoint-url", "http://127.0.0.1:9"])
    assert result.exit_code == 1, result.output
    assert f"{dataset}:line 1" in result.stderr


def test_the_manifest_environment_is_used_for_validation(fake: Fake, tmp_path: Path) -> None:
    # ask_to_code tasks: invalid for the default environment (wordle: no answer), valid with the manifest's.
    dataset = tmp_path / "code.jsonl"
    dataset.write_text(
        "".join(
            (SAMPLE.parents[2] / "ask_to_code" / "sample" / "train.jsonl").read_text().splitlines(keepends=True)[:3]
        )
    )
    refused = runner.invoke(app, ["submit", str(dataset)])
    assert refused.exit_code == 1
    assert f"{dataset}:line 1" in refused.stderr
    manifest = _manifest(tmp_path, {"backend": "local", "environment": "ask_to_code"})
    accepted = runner.invoke(app, ["submit", str(dataset), "--manifest", str(manifest), "--json"])
    assert accepted.exit_code == 0, accepted.output


def test_a_bad_manifest_is_a_usage_error(fake: Fake, tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, {"backend": "quantum"})
    result = runner.invoke(app, ["submit", str(_dataset(tmp_path)), "--manifest", str(manifest), "--json"])
    assert result.exit_code == 2
    assert "backend" in json.loads(result.stdout)["error"]
    assert "Versions" not in fake.s3.list_object_versions(Bucket=BUCKET)


def test_a_name_that_would_not_start_a_run_is_refused(fake: Fake, tmp_path: Path) -> None:
    result = runner.invoke(app, ["submit", str(_dataset(tmp_path)), "--name", "data.csv"])
    assert result.exit_code == 2
    assert ".jsonl" in result.stderr


def test_an_existing_remote_manifest_is_used_and_kept(fake: Fake, tmp_path: Path) -> None:
    fake.s3.put_object(Bucket=BUCKET, Key="training-data/wordle-mini.run.json", Body=b'{"backend": "nope"}')
    result = runner.invoke(app, ["submit", str(_dataset(tmp_path))])
    assert result.exit_code == 2
    assert "training-data/wordle-mini.run.json" in result.stderr
    fake.s3.put_object(Bucket=BUCKET, Key="training-data/wordle-mini.run.json", Body=json.dumps(MANIFEST).encode())
    result = runner.invoke(app, ["submit", str(_dataset(tmp_path))])
    assert result.exit_code == 0, result.output
    assert "using the manifest already at" in result.stderr
    versions = fake.s3.list_object_versions(Bucket=BUCKET, Prefix="training-data/wordle-mini.run.json")["Versions"]
    assert len(versions) == 2  # the two this test wrote; submit did not replace it


def test_submit_watch_follows_the_run_to_its_end(fake: Fake, tmp_path: Path, no_sleep: Sleeper) -> None:
    def pipeline_step() -> None:
        listing = fake.s3.list_object_versions(Bucket=BUCKET, Prefix="training-data/wordle-mini.jsonl")
        version = listing["Versions"][0]["VersionId"]
        run_id = _started_by_trigger(fake, "training-data/wordle-mini.jsonl", version)["run_id"]
        fake.seed_run(run_id, status=RunStatus.SUCCEEDED, metrics={"reward_mean": 0.9})

    no_sleep(pipeline_step)
    result = runner.invoke(app, ["submit", str(_dataset(tmp_path)), "--manifest", str(_manifest(tmp_path)), "--watch"])
    assert result.exit_code == 0, result.output
    assert "SUCCEEDED" in result.stdout
    assert "0.9000" in result.stdout


def test_submit_watch_exit_code_is_the_runs_outcome(fake: Fake, tmp_path: Path, no_sleep: Sleeper) -> None:
    def pipeline_step() -> None:
        listing = fake.s3.list_object_versions(Bucket=BUCKET, Prefix="training-data/wordle-mini.jsonl")
        run_id = _started_by_trigger(fake, "training-data/wordle-mini.jsonl", listing["Versions"][0]["VersionId"])
        fake.seed_run(run_id["run_id"], status=RunStatus.FAILED)

    no_sleep(pipeline_step)
    result = runner.invoke(app, ["submit", str(_dataset(tmp_path)), "--watch", "--json"])
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["status"] == "FAILED"


def test_watch_finds_the_run_when_the_event_carried_no_version_id(
    fake: Fake, tmp_path: Path, no_sleep: Sleeper
) -> None:
    """MiniStack's S3 events omit version-id, so the trigger hashes 'null': watch must still find the run."""
    key = "training-data/wordle-mini.jsonl"
    seen: list[str] = []

    def pipeline_step() -> None:
        if not seen:
            event = {"detail": {"bucket": {"name": BUCKET}, "object": {"key": key}}}
            seen.append(trigger.handle_upload(fake.runtime(), event)["run_id"])
        else:
            fake.seed_run(seen[0], status=RunStatus.SUCCEEDED)

    no_sleep(pipeline_step)
    result = runner.invoke(app, ["submit", str(_dataset(tmp_path)), "--watch", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["run_id"] == seen[0]


def test_an_execution_for_another_upload_is_not_taken_for_ours(fake: Fake) -> None:
    version = fake.s3.put_object(Bucket=BUCKET, Key="training-data/a.jsonl", Body=b"{}\n")["VersionId"]
    other = trigger.handle_upload(
        fake.runtime(), {"detail": {"bucket": {"name": BUCKET}, "object": {"key": "training-data/a.jsonl"}}}
    )
    ours = other["run_id"].rsplit("-", 1)[0] + "-00000000"
    found = started_run_for_upload(
        fake.stepfunctions, fake.deployment, run_id=ours, key="training-data/b.jsonl", version_id=version
    )
    assert found is None
    found = started_run_for_upload(
        fake.stepfunctions, fake.deployment, run_id=ours, key="training-data/a.jsonl", version_id="another-version"
    )
    assert found is None
    found = started_run_for_upload(
        fake.stepfunctions, fake.deployment, run_id=ours, key="training-data/a.jsonl", version_id=version
    )
    assert found == other["run_id"]


def test_a_multipart_upload_reports_its_version_and_progress(fake: Fake, tmp_path: Path) -> None:
    """Above boto3's 8 MiB threshold the dataset goes up in parts; the version comes from CompleteMultipartUpload."""
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"x" * (9 * 1024 * 1024))
    sent: list[int] = []
    submitted = client_submit.upload(
        fake.s3, fake.deployment, big, key="training-data/big.jsonl", manifest=None, progress=sent.append
    )
    head = fake.s3.head_object(Bucket=BUCKET, Key="training-data/big.jsonl")
    assert submitted.version_id == head["VersionId"]
    assert sum(sent) == big.stat().st_size
    assert submitted.manifest_key is None


def test_a_separate_eval_file_goes_to_the_manifests_eval_dataset_key_first(
    fake: Fake, tmp_path: Path, s3_calls: list[tuple[str, str]]
) -> None:
    manifest = _manifest(tmp_path, {**MANIFEST, "eval_dataset": "eval-data/wordle-mini.jsonl"})
    dataset = _dataset(tmp_path)
    missing = runner.invoke(app, ["submit", str(dataset), "--manifest", str(manifest)])
    assert missing.exit_code == 2
    assert "--eval-file" in missing.stderr
    eval_file = tmp_path / "eval.jsonl"
    eval_file.write_text("".join((SAMPLE.parent / "eval.jsonl").read_text().splitlines(keepends=True)[:5]))
    result = runner.invoke(
        app, ["submit", str(dataset), "--manifest", str(manifest), "--eval-file", str(eval_file), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["eval_uri"] == f"s3://{BUCKET}/eval-data/wordle-mini.jsonl"
    assert [k for op, k in s3_calls if op == "PutObject"] == [
        "eval-data/wordle-mini.jsonl",
        "training-data/wordle-mini.run.json",
        "training-data/wordle-mini.jsonl",
    ]
    assert fake.s3.get_object(Bucket=BUCKET, Key="eval-data/wordle-mini.jsonl")["Body"].read() == eval_file.read_bytes()


def test_an_unknown_environment_in_the_manifest_is_a_clean_usage_error(fake: Fake, tmp_path: Path) -> None:
    # Issue 24, friction 1: the manifest's typo was a traceback (UnknownEnvironmentError); --env's is an exit 2.
    manifest = _manifest(tmp_path, {**MANIFEST, "environment": "wordel"})
    result = runner.invoke(app, ["submit", str(_dataset(tmp_path)), "--manifest", str(manifest)])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert str(manifest) in result.output
    assert "wordel" in result.output
    assert "Versions" not in fake.s3.list_object_versions(Bucket=BUCKET)


def test_without_a_manifest_rows_are_checked_with_the_deployments_environment(
    fake: Fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 24, friction 2: without a manifest, submit checked the rows as wordle whatever the deployment's default
    # environment was (validate read cdk.json); the output now names the environment it used.
    monkeypatch.chdir(tmp_path)
    cdk_json = {"app": "python app.py", "context": {"run_environment": "sop_support"}}
    (tmp_path / "cdk.json").write_text(json.dumps(cdk_json))
    refused = runner.invoke(app, ["submit", str(_dataset(tmp_path))])
    assert refused.exit_code == 1, refused.output  # wordle rows are not sop_support tickets
    assert "nothing was uploaded" in refused.output
    (tmp_path / "cdk.json").write_text(json.dumps({"app": "python app.py", "context": {"run_environment": "wordle"}}))
    accepted = runner.invoke(app, ["submit", str(_dataset(tmp_path))])
    assert accepted.exit_code == 0, accepted.output
    assert "rows checked as environment 'wordle'" in accepted.output


def test_submit_says_what_the_runs_backend_lacks_and_the_command_that_supplies_it(
    fake: Fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 36 item 2: a default (verl) run on a deployment without a trainer image or a model is refused at
    # Preflight; submit says so before anything runs, naming the commands, and stops saying it once they ran.
    monkeypatch.chdir(tmp_path)  # no cdk.json: the default settings, whose default backend is verl
    lacking = runner.invoke(app, ["submit", str(_dataset(tmp_path))])
    assert lacking.exit_code == 0, lacking.output
    assert "this run's backend 'verl' cannot run yet" in lacking.output
    assert "`mtrl image build verl`" in lacking.output
    assert "`mtrl model import <hub-id>[@revision]`" in lacking.output
    ssm = boto3.client("ssm", region_name=fake.deployment.region)
    record_image(
        ssm,
        "mtrl",
        RegisteredImage(
            "123456789012.dkr.ecr.us-east-1.amazonaws.com/mtrl-verl-trainer@sha256:" + "c" * 64, "2026-12-01T00:00:00Z"
        ),
    )
    copy = VerlModelSettings(
        id="Qwen/Qwen2.5-0.5B-Instruct",
        s3_uri=f"s3://{BUCKET}/models/Qwen/Qwen2.5-0.5B-Instruct/{'a' * 40}/",
        sha256="d" * 64,
    )
    record_model(ssm, "mtrl", RegisteredModel(copy, "2026-12-01T00:00:00Z", "hub"))
    ready = runner.invoke(app, ["submit", str(_dataset(tmp_path))])
    assert ready.exit_code == 0, ready.output
    assert "cannot run yet" not in ready.output
    local = runner.invoke(app, ["submit", str(_dataset(tmp_path)), "--manifest", str(_manifest(tmp_path))])
    assert "cannot run yet" not in local.output  # the local backend needs nothing of the kind
