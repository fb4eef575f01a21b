"""`mtrl image build verl` / `mtrl image list` through the real entry point against a deployment in moto, and the
done-when of issue 36 item 2: after deploy, the image build and a model import take the default backend from "refused
at Preflight, naming the command" to "ready" with no redeploy."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from mtrl.backends._aws import AwsClients
from mtrl.backends.verl.adapter import VerlAdapter
from mtrl.backends.verl.catalog import image_parameter
from mtrl.backends.verl.config import verl_pipeline_values
from mtrl.backends.verl.run_identity import trainer_role_name
from mtrl.cli import app
from mtrl.contracts.backend import RunContext
from mtrl.kube.client import KubeClient
from mtrl.runs.manifest import resolve_run_settings
from mtrl.runs.phases.inputs import adapter_settings
from mtrl.runs.runtime import Runtime
from mtrl.settings import load_settings
from mtrl.settings.pipeline import PipelineSettings
from tests.aws_fixtures import REGION
from tests.unit.backends.aws_fakes import FakeAws, FakeCluster, new_session
from tests.unit.backends.verl.fake_kube import FakeKube, serve
from tests.unit.cli.builders_world import HUB_FILES, PREFIX, FakeBuilder, FakeHub, install
from tests.unit.client.conftest import BUCKET, Fake

runner = CliRunner()
MODEL_ID = "Qwen/Qwen2.5-0.5B-Instruct"
RUN_ID = "wordle-20261201T120000Z-0a1b2c3d"
GROUPS = [{"name": "gpu", "instance_type": "ml.p5.48xlarge", "run_count": 2, "purpose": "training"}]


@pytest.fixture
def builder(fake: Fake, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeBuilder:
    return install(monkeypatch, tmp_path, FakeHub(MODEL_ID, HUB_FILES))


def _mtrl(*args: str) -> Any:
    return runner.invoke(app, list(args))


def test_build_records_the_pushed_image_by_digest(builder: FakeBuilder) -> None:
    result = _mtrl("image", "build", "verl", "--json")
    assert result.exit_code == 0, result.output
    built = json.loads(result.stdout)
    assert built["uri"].startswith("123456789012.dkr.ecr.us-east-1.amazonaws.com/mtrl-verl-trainer@sha256:")
    (request,) = builder.requests
    assert request["projectName"] == "mtrl-verl-trainer-image"
    assert request["sourceTypeOverride"] == "S3"
    assert request["sourceLocationOverride"].startswith(f"{BUCKET}/image-builds/")
    assert request["sourceVersion"]  # the very archive uploaded
    stored = boto3.client("ssm", region_name=REGION).get_parameter(Name=image_parameter(PREFIX))["Parameter"]
    assert json.loads(stored["Value"])["uri"] == built["uri"]
    listed = _mtrl("image", "list", "--json")
    assert [entry["uri"] for entry in json.loads(listed.stdout)] == [built["uri"]]


def test_a_failed_build_records_nothing(builder: FakeBuilder) -> None:
    builder.failing.add("mtrl-verl-trainer-image")
    result = _mtrl("image", "build", "verl")
    assert result.exit_code == 1
    assert "ended FAILED in phase BUILD" in result.output
    assert json.loads(_mtrl("image", "list", "--json").stdout) == []


def test_an_exported_image_outside_the_deployments_repository_is_refused(builder: FakeBuilder) -> None:
    builder.effects["mtrl-verl-trainer-image"] = lambda _request: {
        "IMAGE_URI": "123456789012.dkr.ecr.us-east-1.amazonaws.com/other@sha256:" + "b" * 64
    }
    result = _mtrl("image", "build", "verl")
    assert result.exit_code == 1
    assert "not an image of mtrl-verl-trainer by digest" in result.output
    assert json.loads(_mtrl("image", "list", "--json").stdout) == []


def test_a_digest_that_is_not_in_ecr_is_refused(builder: FakeBuilder) -> None:
    builder.effects["mtrl-verl-trainer-image"] = lambda _request: {
        "IMAGE_URI": "123456789012.dkr.ecr.us-east-1.amazonaws.com/mtrl-verl-trainer@sha256:" + "b" * 64
    }
    result = _mtrl("image", "build", "verl")
    assert result.exit_code == 1
    assert "the push did not complete" in result.output


def test_an_unknown_image_and_a_deployment_without_builders_are_named(fake: Fake) -> None:
    assert "no image 'nova'" in _mtrl("image", "build", "nova").output
    result = _mtrl("image", "build", "verl")
    assert result.exit_code == 1
    assert "has no build project mtrl-verl-trainer-image: deploy this version" in result.output


# -- issue 36 item 2, done when: deploy → image build → model import → Preflight ready -----------------------------
@pytest.fixture
def cluster(fake: Fake) -> Iterator[tuple[VerlAdapter, FakeCluster]]:
    session = new_session()
    aws = FakeAws(session)
    hyperpod = FakeCluster(aws, name="mtrl-hyperpod", group="gpu")
    kube = FakeKube(valid_tokens={"token"})
    with serve(kube):
        client = KubeClient(kube.url, token=lambda: "token")
        yield VerlAdapter(AwsClients(session), kube=lambda _config: client), hyperpod


def _preflight(adapter: VerlAdapter) -> dict[str, Any]:
    """Preflight of a default-backend run as the pipeline runs it: the verl values as the deployment ships them
    (default settings: no image, no model), completed from the catalog when the effective settings are stored."""
    deploy = load_settings({"hyperpod_instance_groups": GROUPS}, environ={"CDK_DEFAULT_REGION": REGION})
    shipped = verl_pipeline_values(
        deploy,
        region=REGION,
        hyperpod_cluster_name="mtrl-hyperpod",
        eks_cluster_name="mtrl-eks",
        mlflow_app_arn=None,
        trainer_role_arn=f"arn:aws:iam::123456789012:role/{trainer_role_name(deploy.prefix)}",
    ).model_dump(mode="json", exclude_unset=True)
    runtime = Runtime(
        dynamodb=None,
        s3=None,
        table="t",
        bucket=BUCKET,
        settings=PipelineSettings.model_validate({}),
        backend_settings={"verl": shipped},
    )
    run = resolve_run_settings(deploy, {"instance_count": 1})
    assert run.backend == "verl"  # the default backend
    record = {"run_id": RUN_ID, "dataset": {"version_id": "v1"}}
    settings = adapter_settings(runtime, record, run)
    context = RunContext(
        run_id=RUN_ID,
        settings=settings,
        dataset_uri=f"s3://{BUCKET}/runs/{RUN_ID}/data/train.jsonl",
        eval_dataset_uri=None,
        output_uri=f"s3://{BUCKET}/runs/{RUN_ID}/",
    )
    return {finding.check: finding for finding in adapter.preflight(context)}


def test_after_deploy_an_image_build_and_a_model_import_make_the_default_backend_ready(
    builder: FakeBuilder, cluster: tuple[VerlAdapter, FakeCluster]
) -> None:
    adapter, _ = cluster
    refused = _preflight(adapter)
    assert not refused["settings"].ok
    assert "`mtrl image build verl`" in refused["settings"].message
    assert "`mtrl model import <hub-id>[@revision]`" in refused["settings"].message
    assert RUN_ID in refused["settings"].message

    assert _mtrl("image", "build", "verl").exit_code == 0
    half = _preflight(adapter)
    assert "mtrl image build" not in half["settings"].message
    assert "`mtrl model import" in half["settings"].message

    imported = _mtrl("model", "import", f"{MODEL_ID}@main", "--json")
    assert imported.exit_code == 0, imported.output
    ready = _preflight(adapter)
    assert all(finding.ok for finding in ready.values()), ready
    assert "Qwen/Qwen2.5-0.5B-Instruct: s3://" in ready["model"].message
    assert "mtrl-verl-trainer@sha256:" in ready["image"].message


def test_explicit_settings_win_over_the_catalog(builder: FakeBuilder, cluster: tuple[VerlAdapter, FakeCluster]) -> None:
    from mtrl.backends.verl.catalog import Catalog, RegisteredImage, with_registered

    image = RegisteredImage(
        uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/mtrl-verl-trainer@sha256:" + "d" * 64,
        recorded_at="2026-12-01T00:00:00Z",
    )
    configured = "123456789012.dkr.ecr.us-east-1.amazonaws.com/mine@sha256:" + "e" * 64
    resolved = with_registered({"verl_image_uri": configured, "verl_models": []}, Catalog(image, ()))
    assert resolved["verl_image_uri"] == configured
    assert with_registered({"verl_image_uri": None}, Catalog(image, ()))["verl_image_uri"] == image.uri
