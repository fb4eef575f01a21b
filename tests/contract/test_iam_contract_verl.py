"""The verl adapter's AWS calls through a whole run (preflight → provision → submit → status → cancel → cleanup),
recorded at botocore, must each be allowed for the pipeline's backend function role as synthesized.

The adapter's settings are the verl section of the backend function's ``MTRL_BACKEND_SETTINGS`` as deployed with a
model copy and an ECR image configured (HyperPod and EKS cluster names, the training group, the namespace; Preflight
reads the copy's SHA256SUMS and describes the image, so the deployment grants exactly those). The EKS
API is the fake Kubernetes server over HTTP (its endpoint is what the faked DescribeCluster answers); the bearer
token is a real presigned-STS token from the session's credentials, which needs no IAM permission to sign.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

from mtrl.backends._aws import AwsClients
from mtrl.backends.hyperpod.common import ProvisioningInProgress
from mtrl.backends.verl.adapter import VerlAdapter
from mtrl.backends.verl.catalog import RegisteredImage, RegisteredModel, record_image, record_model, registered_values
from mtrl.backends.verl.supply import image_repository_name
from mtrl.contracts.backend import JobState
from mtrl.settings.verl import VerlModelSettings
from tests.contract.iam.model import ACCOUNT
from tests.contract.iam_contract import AppModel, AwsCall, CallRecorder, assert_calls_allowed
from tests.contract.recorded_runs import (
    BACKEND_ROLE,
    BackendRun,
    Clock,
    ModelCluster,
    deployed_backend_settings,
    deployed_data_bucket,
    model_account_aws,
)
from tests.unit.backends.aws_fakes import FakeAws, new_session
from tests.unit.backends.verl.fake_kube import RAY, FakeKube, serve
from tests.unit.backends.verl.verl_support import IMAGE, MODEL, MODEL_SUMS, FakePodIdentity, publish_model_and_image

# The trainer image in the modelled account's own registry (Preflight describes it there).
ACCOUNT_IMAGE = IMAGE.replace("123456789012", ACCOUNT)


@pytest.fixture(scope="module")
def verl_app_model() -> AppModel:
    return AppModel.synth(overrides={"verl_models": json.dumps([MODEL]), "verl_image_uri": ACCOUNT_IMAGE})


def _cluster(aws: FakeAws, app_model: AppModel, deployed: dict[str, Any], fake: FakeKube) -> ModelCluster:
    """The deployment's HyperPod cluster (faked) and its EKS API endpoint (the fake Kubernetes server)."""
    cluster = ModelCluster(
        aws,
        name=deployed["hyperpod_cluster_name"],
        arn=str(app_model.sagemaker_cluster_arn(deployed["hyperpod_cluster_name"])),
        node_role=app_model.arn_of("mtrl-cluster/HyperPod/ExecutionRole"),
    )
    cluster.group = deployed["verl_instance_group"]
    aws.on(
        "eks",
        "DescribeCluster",
        lambda params: {
            "cluster": {
                "name": deployed["eks_cluster_name"],
                "endpoint": fake.url,
                "certificateAuthority": {"data": base64.b64encode(b"not used over http").decode()},
            }
        },
    )
    return cluster


@pytest.fixture
def recorded_run(verl_app_model: AppModel, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[AwsCall]]:
    app_model = verl_app_model
    deployed = deployed_backend_settings(app_model, "verl")
    fake = FakeKube(accept_eks_tokens=True)
    with model_account_aws(monkeypatch, app_model), serve(fake):
        aws = FakeAws(new_session())
        FakePodIdentity(aws)  # moto has no EKS Pod Identity
        bucket = deployed_data_bucket(app_model)
        aws.session.client("s3").create_bucket(Bucket=bucket)
        publish_model_and_image(aws.session)
        cluster = _cluster(aws, app_model, deployed, fake)
        run_id = "wordle-20261201T120000Z-0a1b2c3d"
        settings = {
            **deployed,
            "run_id": run_id,
            "instance_count": 1,
            "environment": "wordle",
            "run_timeout_minutes": 60,
        }
        adapter = VerlAdapter(AwsClients(aws.session), clock=Clock())
        backend = BackendRun(run_id=run_id, settings=settings, bucket=bucket)

        findings = backend(adapter.preflight)
        assert all(f.ok for f in findings), findings
        with pytest.raises(ProvisioningInProgress):
            backend(adapter.provision)
        cluster.arrive()
        backend(adapter.provision)
        job_id = backend(adapter.submit)
        name = job_id.split("/")[1]
        fake.set_status(f"{RAY}/namespaces/{deployed['verl_namespace']}/rayjobs/{name}", jobDeploymentStatus="Running")
        assert backend(adapter.status, job_id).state is JobState.RUNNING
        # The Evaluate phase reads the held-out evaluation the trainer wrote under the run's output prefix.
        evaluation = {"tasks": 2, "measure": "success", "before": None, "after": {"reward": 0.5, "success": 0.5}}
        aws.session.client("s3").put_object(
            Bucket=bucket, Key=f"runs/{run_id}/evaluation.json", Body=json.dumps(evaluation).encode()
        )
        assert backend(adapter.evaluate)["heldout_success_after"] == 0.5
        assert backend(adapter.evaluation_settings) == {"evaluation_measure": "success"}
        backend(adapter.cancel, job_id)
        backend(adapter.cleanup)
        assert cluster.target == int(deployed["verl_idle_instance_count"])
        yield backend.calls


def test_every_call_of_a_verl_run_is_allowed_for_the_backend_role(
    recorded_run: list[AwsCall], verl_app_model: AppModel
) -> None:
    operations = {(c.service, c.operation) for c in recorded_run}
    assert {("eks", "DescribeCluster"), ("sagemaker", "UpdateCluster"), ("s3", "GetObject")} <= operations
    assert ("ecr", "DescribeImages") in operations  # Preflight: the pinned image exists
    # Submit gives the run's service account the trainer role scoped to the run; Cleanup removes it.
    assert {("eks", "CreatePodIdentityAssociation"), ("eks", "DeletePodIdentityAssociation")} <= operations
    assert_calls_allowed(recorded_run, BACKEND_ROLE, model=verl_app_model)


def test_preflight_reads_the_catalog_and_checks_what_it_registered(
    app_model: AppModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default deployment (no verl_image_uri, no verl_models): Preflight completes its values from the catalog
    that `mtrl image build verl` and `mtrl model import` wrote, then reads the registered copy's SHA256SUMS and
    describes the built image in the deployment's own repository; every call allowed for the backend role."""
    deployed = deployed_backend_settings(app_model, "verl")
    assert not deployed.get("verl_image_uri")
    assert not deployed.get("verl_models")
    fake = FakeKube(accept_eks_tokens=True)
    with model_account_aws(monkeypatch, app_model), serve(fake):
        aws = FakeAws(new_session())
        bucket = deployed_data_bucket(app_model)
        s3 = aws.session.client("s3")
        s3.create_bucket(Bucket=bucket)
        ecr = aws.session.client("ecr")
        repository = image_repository_name("mtrl")
        uri = ecr.create_repository(repositoryName=repository)["repository"]["repositoryUri"]
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "layers": []}
        digest = ecr.put_image(repositoryName=repository, imageManifest=json.dumps(manifest), imageTag="build-1")[
            "image"
        ]["imageId"]["imageDigest"]
        ssm = aws.session.client("ssm")
        record_image(ssm, "mtrl", RegisteredImage(uri=f"{uri}@{digest}", recorded_at="2026-12-01T00:00:00Z"))
        prefix = f"models/{MODEL['id']}/{'a' * 40}/"
        s3.put_object(Bucket=bucket, Key=prefix + "SHA256SUMS", Body=MODEL_SUMS)
        copy = VerlModelSettings(id=MODEL["id"], s3_uri=f"s3://{bucket}/{prefix}", sha256=MODEL["sha256"])
        record_model(ssm, "mtrl", RegisteredModel(copy, recorded_at="2026-12-01T00:00:00Z", source="hub"))
        _cluster(aws, app_model, deployed, fake)
        with CallRecorder() as reading:
            values = registered_values(deployed, clients=AwsClients(aws.session))
        run_id = "wordle-20261201T120000Z-0a1b2c3d"
        settings = {**values, "run_id": run_id, "instance_count": 1, "environment": "wordle", "run_timeout_minutes": 60}
        backend = BackendRun(run_id=run_id, settings=settings, bucket=bucket)
        findings = backend(VerlAdapter(AwsClients(aws.session), clock=Clock()).preflight)
    assert all(f.ok for f in findings), findings
    calls = [*reading.calls, *backend.calls]
    operations = {(c.service, c.operation) for c in calls}
    assert {("ssm", "GetParameter"), ("ssm", "GetParametersByPath"), ("ecr", "DescribeImages")} <= operations
    assert_calls_allowed(calls, BACKEND_ROLE, model=app_model)
