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

import pytest

from mtrl.backends._aws import AwsClients
from mtrl.backends.hyperpod.common import ProvisioningInProgress
from mtrl.backends.verl.adapter import VerlAdapter
from mtrl.contracts.backend import JobState
from tests.contract.iam.model import ACCOUNT
from tests.contract.iam_contract import AppModel, AwsCall, assert_calls_allowed
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
from tests.unit.backends.verl.verl_support import IMAGE, MODEL, FakePodIdentity, publish_model_and_image

# The trainer image in the modelled account's own registry (Preflight describes it there).
ACCOUNT_IMAGE = IMAGE.replace("123456789012", ACCOUNT)


@pytest.fixture(scope="module")
def verl_app_model() -> AppModel:
    return AppModel.synth(overrides={"verl_models": json.dumps([MODEL]), "verl_image_uri": ACCOUNT_IMAGE})


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
