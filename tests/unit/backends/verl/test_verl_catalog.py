"""The deployment's catalog of trainer images and model copies (SSM, moto): what is recorded is read back, explicit
settings win, a tampered parameter is refused naming it, and the readiness warning names the commands."""

from __future__ import annotations

import json
import re
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from mtrl.backends._aws import AwsClients
from mtrl.backends.verl.catalog import (
    Catalog,
    RegisteredImage,
    RegisteredModel,
    image_parameter,
    model_parameter,
    read_catalog,
    record_image,
    record_model,
    registered_values,
    with_registered,
)
from mtrl.cli import app
from mtrl.contracts.backend import BackendError
from mtrl.settings import load_settings
from mtrl.settings.verl import VerlModelSettings
from tests.unit.backends.verl.verl_support import MODEL

REGISTRY = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
IMAGE = f"{REGISTRY}/mtrl-verl-trainer@sha256:" + "c" * 64
OTHER = f"{REGISTRY}/mine@sha256:" + "e" * 64
T = "2026-12-01T00:00:00Z"


def _copy(model_id: str, sha: str = "d") -> VerlModelSettings:
    return VerlModelSettings(id=model_id, s3_uri=f"s3://bucket/models/{model_id}/local-{'0' * 16}/", sha256=sha * 64)


@pytest.fixture
def ssm(mocked_aws: None) -> Any:
    return boto3.client("ssm", region_name="us-east-1")


def test_what_is_recorded_is_read_back_oldest_model_first(ssm: Any) -> None:
    assert read_catalog(ssm, "mtrl") == Catalog(None, ())
    record_image(ssm, "mtrl", RegisteredImage(IMAGE, "2026-12-01T00:00:00Z", "build:1"))
    record_model(ssm, "mtrl", RegisteredModel(_copy("b/second"), "2026-12-02T00:00:00Z", "hub"))
    record_model(ssm, "mtrl", RegisteredModel(_copy("a/first"), "2026-12-01T00:00:00Z", "local"))
    record_model(ssm, "other", RegisteredModel(_copy("c/elsewhere"), "2026-12-01T00:00:00Z", "hub"))
    catalog = read_catalog(ssm, "mtrl")
    assert catalog.image == RegisteredImage(IMAGE, "2026-12-01T00:00:00Z", "build:1")
    assert [m.model.id for m in catalog.models] == ["a/first", "b/second"]  # another prefix's models are not ours


def test_only_an_ecr_image_by_digest_is_recorded(ssm: Any) -> None:
    with pytest.raises(ValueError, match="pinned by digest"):
        record_image(ssm, "mtrl", RegisteredImage(IMAGE.split("@", maxsplit=1)[0] + ":latest", T))


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("/mtrl/images/verl", "not json", "is not a registered image"),
        ("/mtrl/images/verl", json.dumps({"uri": "docker.io/x:latest"}), "is not a registered image"),
        ("/mtrl/models/a/b", json.dumps({"id": "a/b", "s3_uri": "s3://x/y/"}), "is not a registered model"),
        (
            "/mtrl/models/a/b",
            json.dumps({"id": "c/d", "s3_uri": "s3://bucket/m/", "sha256": "d" * 64}),
            "under another name",
        ),
    ],
)
def test_a_tampered_parameter_is_refused_naming_it(ssm: Any, name: str, value: str, message: str) -> None:
    ssm.put_parameter(Name=name, Value=value, Type="String")
    with pytest.raises(BackendError, match=message) as raised:
        read_catalog(ssm, "mtrl")
    assert name in str(raised.value)


def _image(**changes: Any) -> str:
    return json.dumps({"uri": IMAGE, "recorded_at": T, "build_id": "mtrl-verl-trainer-image:1", **changes})


_ID = "Qwen/Qwen2.5-0.5B-Instruct"
_AT = f"s3://bucket/models/{_ID}/{'a' * 40}/"


def _model(**changes: Any) -> str:
    fields = {"id": _ID, "s3_uri": _AT, "sha256": "d" * 64, "revision": "a" * 40, "recorded_at": T, "source": "hub"}
    return json.dumps({**fields, **changes})


# Values only someone who wrote the parameter by hand could have put there (the CLI never writes them): each would be
# used by Preflight (the RayJob's image, the copy a run's session policy lets its pods read) or printed by the list
# commands (terminal escapes and Rich markup in the timestamp or source).
TAMPERED = [
    ("images/verl", _image(uri=f"{REGISTRY}/someone-else@sha256:{'c' * 64}"), "deployment's repository"),
    (
        "images/verl",
        _image(uri=f"210987654321.dkr.ecr.eu-west-1.amazonaws.com/mtrl-verl-trainer@sha256:{'c' * 64}"),
        "us-east-1",
    ),
    ("images/verl", _image(uri=IMAGE + "\n"), "pinned by digest"),
    ("images/verl", _image(recorded_at="\x1b[2J\x1b]8;;https://evil.example\x1b\\click"), "recorded_at"),
    ("images/verl", _image(recorded_at="[/]"), "recorded_at"),
    ("images/verl", _image(recorded_at=None), "recorded_at"),
    ("images/verl", _image(build_id="[link=https://evil.example]x[/link]"), "build_id"),
    ("images/verl", _image(build_id=7), "build_id"),
    (f"models/{_ID}", _model(s3_uri="s3://bucket/"), "is not a copy"),
    (f"models/{_ID}", _model(s3_uri="s3://bucket/runs/wordle-20261201T000000Z-0a1b2c3d/"), "is not a copy"),
    (f"models/{_ID}", _model(s3_uri=f"s3://bucket/models/other/model/{'a' * 40}/"), "is not a copy"),
    (f"models/{_ID}", _model(s3_uri=f"s3://bucket/models/{_ID}/{'a' * 40}/sub/"), "is not a copy"),
    (f"models/{_ID}", _model(s3_uri=f"s3://bucket/models/{_ID}/{'b' * 40}/"), "is not a copy"),
    (f"models/{_ID}", _model(s3_uri=f"s3://bucket/models/{_ID}/main/", revision=None), "is not a copy"),
    (f"models/{_ID}", _model(s3_uri=f"s3://bucket/x/models/{_ID}/{'a' * 40}/"), "is not a copy"),
    (f"models/{_ID}", _model(source="[/]"), "source"),
    (f"models/{_ID}", _model(source=None), "source"),
    (f"models/{_ID}", _model(recorded_at="\x1b]0;pwned\x07"), "recorded_at"),
    (f"models/{_ID}", _model(recorded_at="2026-12-01T00:00:00Z\n"), "recorded_at"),
]


@pytest.mark.parametrize(("name", "value", "message"), TAMPERED)
def test_a_value_the_cli_never_writes_is_refused_naming_the_parameter(
    ssm: Any, name: str, value: str, message: str
) -> None:
    ssm.put_parameter(Name=f"/mtrl/{name}", Value=value, Type="String")
    with pytest.raises(BackendError, match=re.escape(message)) as raised:
        read_catalog(ssm, "mtrl")
    assert f"/mtrl/{name}" in str(raised.value)


def test_the_untampered_values_are_read(ssm: Any) -> None:
    """The table's baseline: each tampered value differs from one the catalog reads in that one field."""
    ssm.put_parameter(Name="/mtrl/images/verl", Value=_image(), Type="String")
    ssm.put_parameter(Name=f"/mtrl/models/{_ID}", Value=_model(), Type="String")
    local = _model(s3_uri=f"s3://bucket/models/{_ID}/local-{'0' * 16}/", revision=None, source="local")
    ssm.put_parameter(Name="/mtrl/models/a/b", Value=local.replace(_ID, "a/b"), Type="String")
    catalog = read_catalog(ssm, "mtrl")
    assert catalog.image is not None
    assert catalog.image.uri == IMAGE
    assert [(m.model.id, m.source) for m in catalog.models] == [("Qwen/Qwen2.5-0.5B-Instruct", "hub"), ("a/b", "local")]


@pytest.mark.parametrize(
    ("registered", "message"),
    [
        (RegisteredModel(_copy("a/b").model_copy(update={"s3_uri": "s3://bucket/"}), T, "hub"), "is not a copy"),
        (RegisteredModel(_copy("a/b"), "[/]", "hub"), "recorded_at"),
        (RegisteredModel(_copy("a/b"), T, "[bold]x"), "source"),
    ],
)
def test_what_the_list_commands_could_not_print_is_never_recorded(
    ssm: Any, registered: RegisteredModel, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        record_model(ssm, "mtrl", registered)
    with pytest.raises(ValueError, match="build_id"):
        record_image(ssm, "mtrl", RegisteredImage(IMAGE, T, "\x1b[2J"))
    with pytest.raises(ValueError, match="deployment's repository"):
        record_image(ssm, "team-b", RegisteredImage(IMAGE, T))
    assert read_catalog(ssm, "mtrl") == Catalog(None, ())


def test_explicit_settings_win_and_come_first() -> None:
    registered = Catalog(
        RegisteredImage(IMAGE, "t"),
        (RegisteredModel(_copy(MODEL["id"], "f"), "t", "hub"), RegisteredModel(_copy("a/other"), "t", "hub")),
    )
    resolved = with_registered({"verl_image_uri": OTHER, "verl_models": [MODEL]}, registered)
    assert resolved["verl_image_uri"] == OTHER
    assert [m["id"] for m in resolved["verl_models"]] == [MODEL["id"], "a/other"]
    assert resolved["verl_models"][0] == MODEL  # the configured copy, not the registered one of the same id
    empty = with_registered({"verl_image_uri": None, "verl_models": []}, registered)
    assert empty["verl_image_uri"] == IMAGE
    assert [m["id"] for m in empty["verl_models"]] == [MODEL["id"], "a/other"]


def test_the_preflight_hook_reads_the_deployments_own_catalog(ssm: Any) -> None:
    team_image = IMAGE.replace("/mtrl-verl-trainer@", "/team-b-verl-trainer@")
    record_image(ssm, "team-b", RegisteredImage(team_image, T))
    values = {"region": "us-east-1", "prefix": "team-b", "verl_image_uri": None, "verl_models": []}
    clients = AwsClients(boto3.Session())
    assert registered_values(values, clients=clients)["verl_image_uri"] == team_image
    assert registered_values({**values, "prefix": "mtrl"}, clients=clients)["verl_image_uri"] is None
    ssm.put_parameter(Name=model_parameter("team-b", "a/b"), Value="{", Type="String")
    with pytest.raises(BackendError, match="/team-b/models/a/b"):
        registered_values(values, clients=clients)


def test_readiness_counts_the_settings_and_what_is_registered(ssm: Any) -> None:
    settings = load_settings({}, environ={"CDK_DEFAULT_REGION": "us-east-1"})
    assert settings.run_backend == "verl"
    gaps = settings.default_backend_gaps()
    assert len(gaps) == 2
    assert "`mtrl image build verl`" in gaps[0]
    assert "`mtrl model import <hub-id>[@revision]`" in gaps[1]
    record_image(ssm, "mtrl", RegisteredImage(IMAGE, T))
    assert settings.default_backend_gaps(ssm) == gaps[1:]
    record_model(ssm, "mtrl", RegisteredModel(_copy("a/b"), T, "hub"))
    assert settings.default_backend_gaps(ssm) == []
    configured = load_settings(
        {"verl_image_uri": IMAGE, "verl_models": json.dumps([MODEL])}, environ={"CDK_DEFAULT_REGION": "us-east-1"}
    )
    assert configured.default_backend_warning() is None
    prefixed = load_settings({"prefix": "team-b"}, environ={"CDK_DEFAULT_REGION": "us-east-1"})
    assert "`mtrl image build verl --prefix team-b`" in (prefixed.default_backend_warning() or "")


def test_config_show_says_what_the_default_backend_lacks(tmp_path: Any) -> None:
    (tmp_path / "cdk.json").write_text(json.dumps({"app": "python app.py", "context": {}}))
    result = CliRunner().invoke(app, ["config", "show", "--cdk-json", str(tmp_path / "cdk.json"), "--json"])
    assert result.exit_code == 0, result.output
    assert "the default backend 'verl' cannot run yet" in result.stderr
    assert "`mtrl image build verl`" in result.stderr
    assert "`mtrl model import <hub-id>[@revision]`" in result.stderr
    json.loads(result.stdout)  # stdout stays one JSON document
    assert image_parameter("mtrl") == "/mtrl/images/verl"


def test_at_preflight_the_image_is_in_the_deployments_account(ssm: Any) -> None:
    """The registry account is the one part of a tampered image reference the repository and region checks leave
    open: at Preflight the deployment's trainer role names the account."""
    elsewhere = IMAGE.replace("123456789012", "210987654321")
    ssm.put_parameter(Name="/mtrl/images/verl", Value=_image(uri=elsewhere), Type="String")
    values = {"region": "us-east-1", "prefix": "mtrl", "verl_image_uri": None, "verl_models": []}
    clients = AwsClients(boto3.Session())
    role = {"verl_trainer_role_arn": "arn:aws:iam::123456789012:role/mtrl-verl-trainer"}
    with pytest.raises(BackendError, match="not in the deployment's account 123456789012"):
        registered_values({**values, **role}, clients=clients)
    ssm.put_parameter(Name="/mtrl/images/verl", Value=_image(), Type="String", Overwrite=True)
    assert registered_values({**values, **role}, clients=clients)["verl_image_uri"] == IMAGE
