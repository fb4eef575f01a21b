"""`mtrl model import` (from the Hub by the in-account job, or ``--from DIR``) and `mtrl model list`, through the real
entry point against a deployment in moto; hub ids and revisions that could reach a shell, a URL or a key are refused
before anything is uploaded or started."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.s3.exceptions import AccessDeniedByLock
from moto.s3.models import S3Backend
from typer.testing import CliRunner

from mtrl.backends.verl.model_copy import parse_sums
from mtrl.cli import app
from tests.aws_fixtures import REGION
from tests.unit.cli.builders_world import COMMIT, HUB_FILES, FakeBuilder, FakeHub, install
from tests.unit.client.conftest import BUCKET, Fake

runner = CliRunner()
MODEL_ID = "Qwen/Qwen2.5-0.5B-Instruct"


@pytest.fixture
def builder(fake: Fake, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeBuilder:
    return install(monkeypatch, tmp_path, FakeHub(MODEL_ID, HUB_FILES))


def _mtrl(*args: str) -> Any:
    return runner.invoke(app, list(args))


def _object(key: str) -> bytes:
    body: bytes = boto3.client("s3", region_name=REGION).get_object(Bucket=BUCKET, Key=key)["Body"].read()
    return body


def test_a_hub_import_copies_the_revision_in_the_account_and_records_its_checksum(builder: FakeBuilder) -> None:
    result = _mtrl("model", "import", f"{MODEL_ID}@main", "--json")
    assert result.exit_code == 0, result.output
    recorded = json.loads(result.stdout)
    prefix = f"models/{MODEL_ID}/{COMMIT}/"
    assert recorded["s3_uri"] == f"s3://{BUCKET}/{prefix}"
    assert recorded["revision"] == COMMIT
    sums = _object(prefix + "SHA256SUMS")
    assert recorded["sha256"] == hashlib.sha256(sums).hexdigest()
    assert parse_sums(sums.decode()) == {name: hashlib.sha256(body).hexdigest() for name, body in HUB_FILES.items()}
    (request,) = builder.requests
    assert request["projectName"] == "mtrl-model-import"
    variables = {item["name"]: item["value"] for item in request["environmentVariablesOverride"]}
    assert variables == {"MODEL_ID": MODEL_ID, "MODEL_REVISION": "main"}
    # the job downloaded by the resolved commit, never by the branch
    assert all(f"/resolve/{COMMIT}/" in url for url in builder.hub.urls[1:])
    listed = json.loads(_mtrl("model", "list", "--json").stdout)
    assert [(m["id"], m["source"]) for m in listed] == [(MODEL_ID, "hub")]


def test_a_copy_missing_a_listed_file_is_not_recorded(builder: FakeBuilder) -> None:
    effect = builder.effects["mtrl-model-import"]

    def incomplete(request: dict[str, Any]) -> dict[str, str]:
        exported = effect(request)
        boto3.client("s3", region_name=REGION).delete_object(
            Bucket=BUCKET, Key=f"models/{MODEL_ID}/{COMMIT}/model.safetensors"
        )
        return exported

    builder.effects["mtrl-model-import"] = incomplete
    result = _mtrl("model", "import", MODEL_ID)
    assert result.exit_code == 1
    assert "lacks files its SHA256SUMS lists: ['model.safetensors']" in result.output
    assert json.loads(_mtrl("model", "list", "--json").stdout) == []


def test_a_job_that_reports_another_commit_than_asked_is_refused(builder: FakeBuilder) -> None:
    result = _mtrl("model", "import", f"{MODEL_ID}@{'b' * 40}")
    assert result.exit_code == 1
    assert f"exported MODEL_COMMIT={COMMIT!r}, not the commit of {'b' * 40}" in result.output
    assert json.loads(_mtrl("model", "list", "--json").stdout) == []


@pytest.mark.parametrize(
    "ref",
    [
        "Qwen/Qwen2.5; rm -rf /",
        "Qwen/$(id)",
        "Qwen/../../etc",
        "-Qwen/x",
        "Qwen",
        "Qwen/x@main; curl evil",
        "Qwen/x@refs/pr/1",
        "Qwen/x@..",
        "Qwen/x@",
        "Qwen/x y",
        # Python's "$" matches before a final newline: each of these passed the old checks and started a build
        "Qwen/Qwen2.5-0.5B-Instruct\n",
        "Qwen/x@main\n",
        f"Qwen/x@{COMMIT}\n",
        "Qwen/x\r",
        "Qwen/x\u2028",
        "Qwen/\u0445",  # a Cyrillic look-alike of "x"
    ],
)
def test_an_unsafe_hub_reference_is_refused_before_anything_starts(builder: FakeBuilder, ref: str) -> None:
    result = _mtrl("model", "import", ref)
    assert result.exit_code == 2, result.output
    assert builder.requests == []
    objects = boto3.client("s3", region_name=REGION).list_objects_v2(Bucket=BUCKET, Prefix="image-builds/")
    assert objects.get("KeyCount", 0) == 0


def test_a_local_copy_is_uploaded_with_its_sha256sums(fake: Fake, tmp_path: Path) -> None:
    copy = tmp_path / "qwen"
    for name, body in HUB_FILES.items():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_bytes(body)
    result = _mtrl("model", "import", MODEL_ID, "--from", str(copy), "--json")
    assert result.exit_code == 0, result.output
    recorded = json.loads(result.stdout)
    prefix = recorded["s3_uri"].removeprefix(f"s3://{BUCKET}/")
    assert prefix.startswith(f"models/{MODEL_ID}/local-")
    sums = _object(prefix + "SHA256SUMS")
    assert recorded["sha256"] == hashlib.sha256(sums).hexdigest()
    assert sorted(parse_sums(sums.decode())) == sorted(HUB_FILES)
    assert _object(prefix + "sub/tokenizer.json") == HUB_FILES["sub/tokenizer.json"]
    assert not (copy / "SHA256SUMS").exists()  # the operator's directory is left as it was


@pytest.mark.parametrize(
    "ref", [f"{MODEL_ID}\n", f"{MODEL_ID}@{COMMIT}\n", f"{MODEL_ID}@{COMMIT}\r\n", f"{MODEL_ID}\x00", "Qwen/x\n@main"]
)
def test_an_unsafe_reference_with_a_local_copy_uploads_nothing(fake: Fake, tmp_path: Path, ref: str) -> None:
    """The old checks let these through to an upload under a key with a line end in it, then failed with a
    traceback (the model settings refused the id): the operator got no clear error and the bucket kept the files."""
    copy = tmp_path / "qwen"
    copy.mkdir()
    (copy / "config.json").write_text("{}")
    result = _mtrl("model", "import", ref, "--from", str(copy))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert boto3.client("s3", region_name=REGION).list_objects_v2(Bucket=BUCKET).get("KeyCount", 0) == 0
    assert json.loads(_mtrl("model", "list", "--json").stdout) == []


def test_a_local_copy_with_a_link_out_of_it_is_refused(fake: Fake, tmp_path: Path) -> None:
    copy = tmp_path / "qwen"
    copy.mkdir()
    (copy / "config.json").write_text("{}")
    (copy / "weights").symlink_to(tmp_path / "elsewhere")
    result = _mtrl("model", "import", MODEL_ID, "--from", str(copy))
    assert result.exit_code == 1
    assert "symbolic link" in result.output
    assert json.loads(_mtrl("model", "list", "--json").stdout) == []


def test_no_model_registered_says_the_command(fake: Fake) -> None:
    result = _mtrl("model", "list")
    assert result.exit_code == 0
    assert "mtrl model import" in result.output


@pytest.mark.parametrize(
    ("field", "value"),
    [("source", "[/]"), ("source", "[link=https://evil.example]hub[/link]"), ("recorded_at", "\x1b[2J\x1b]0;x\x07")],
)
def test_the_list_refuses_a_tampered_entry_instead_of_printing_it(fake: Fake, field: str, value: str) -> None:
    """A hand-written parameter's words reached Rich as markup and the terminal as escapes: '[/]' ended the command
    with a MarkupError traceback, a link or a screen clear was rendered. Now the entry is refused, named."""
    entry = {
        "id": MODEL_ID,
        "s3_uri": f"s3://{BUCKET}/models/{MODEL_ID}/{COMMIT}/",
        "sha256": "d" * 64,
        "revision": COMMIT,
        "recorded_at": "2026-12-01T00:00:00Z",
        "source": "hub",
    }
    name = f"/mtrl/models/{MODEL_ID}"
    ssm = boto3.client("ssm", region_name=REGION)
    ssm.put_parameter(Name=name, Value=json.dumps({**entry, field: value}), Type="String")
    result = _mtrl("model", "list")
    assert result.exit_code == 1, result.output
    assert f"parameter {name} is not a registered model ({field}" in result.output
    assert "\x1b]" not in result.output
    assert "\x1b[2J" not in result.output


def _local_copy(directory: Path, files: dict[str, bytes]) -> Path:
    for name, body in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(body)
    return directory


def _models() -> dict[str, bytes]:
    s3 = boto3.client("s3", region_name=REGION)
    keys = [item["Key"] for item in s3.list_objects_v2(Bucket=BUCKET, Prefix="models/").get("Contents", [])]
    return {key: _object(key) for key in keys}


def _failing_puts(monkeypatch: pytest.MonkeyPatch, failing: str) -> None:
    """S3 refuses (AccessDenied, no retry) every PUT of a key ending in ``failing``, as a policy or a lost session
    would midway through an upload."""
    original = S3Backend.put_object

    def put_object(backend: S3Backend, bucket_name: str, key_name: str, *args: Any, **kwargs: Any) -> Any:
        if key_name.endswith(failing):
            raise AccessDeniedByLock
        return original(backend, bucket_name, key_name, *args, **kwargs)

    monkeypatch.setattr(S3Backend, "put_object", put_object)


@pytest.mark.parametrize("failing", ["config.json", "model.safetensors", "sub/tokenizer.json", "SHA256SUMS"])
def test_a_failed_local_upload_changes_nothing(
    fake: Fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """Before: boto3's S3UploadFailedError escaped as a traceback and the files uploaded before it stayed."""
    copy = _local_copy(tmp_path / "qwen", HUB_FILES)
    _failing_puts(monkeypatch, failing)
    result = _mtrl("model", "import", f"{MODEL_ID}@{COMMIT}", "--from", str(copy))
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)  # the CLI's own error, not an escaped exception
    assert "AccessDenied" in result.output
    assert _models() == {}
    assert json.loads(_mtrl("model", "list", "--json").stdout) == []


def test_another_copy_of_the_same_commit_never_overwrites_the_recorded_one(fake: Fake, tmp_path: Path) -> None:
    """Before: the second copy's files replaced the first's in place, and when its upload then failed the recorded
    copy was left half replaced (its SHA256SUMS pinned, some files another copy's)."""
    first = _local_copy(tmp_path / "first", HUB_FILES)
    assert _mtrl("model", "import", f"{MODEL_ID}@{COMMIT}", "--from", str(first)).exit_code == 0
    recorded, stored = _mtrl("model", "list", "--json").stdout, _models()
    second = _local_copy(tmp_path / "second", {**HUB_FILES, "config.json": b'{"model_type": "other"}'})
    with pytest.MonkeyPatch.context() as failing:
        _failing_puts(failing, "sub/tokenizer.json")
        result = _mtrl("model", "import", f"{MODEL_ID}@{COMMIT}", "--from", str(second))
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    assert "already holds another copy" in result.output
    assert _models() == stored
    assert _mtrl("model", "list", "--json").stdout == recorded
    again = _mtrl("model", "import", f"{MODEL_ID}@{COMMIT}", "--from", str(first), "--json")
    assert again.exit_code == 0, again.output  # the same copy again is the same objects
    assert _models() == stored


def test_a_local_file_s3_could_not_name_is_refused_before_any_upload(fake: Fake, tmp_path: Path) -> None:
    """S3 keys hold at most 1,024 UTF-8 bytes (S3 User Guide, "Naming Amazon S3 objects"): a deep path was found only
    midway through the upload."""
    deep = "/".join(["d" * 200] * 4) + "/" + "é" * 100 + ".bin"  # fine on disk, over S3's limit under the prefix
    copy = _local_copy(tmp_path / "qwen", {"config.json": b"{}", deep: b"w"})
    result = _mtrl("model", "import", MODEL_ID, "--from", str(copy))
    assert result.exit_code == 1, result.output
    assert "over S3's 1024" in result.output
    assert _models() == {}
