"""The verl adapter against a fake Kubernetes API server over real HTTP, SageMaker faked at botocore and S3 in moto.

Statuses: KubeRay v1.7.0 ``rayjob_types.go`` (deployment statuses incl. ValidationFailed; no Scheduling), the open
kuberay issue #2314 (jobStatus RUNNING while the deployment is Failed) and verl #5725 (a clean exit after 0 steps on
resume), as the research note part B §1.3-1.4 records them.
"""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest

from mtrl.backends._aws import AwsClients
from mtrl.backends.hyperpod.common import CAPACITY_KIND, ProvisioningInProgress
from mtrl.backends.verl.access import namespace_manifests
from mtrl.backends.verl.adapter import RAYJOB_KIND, REQUIRED_ACCESS, VerlAdapter
from mtrl.backends.verl.config import parse_config
from mtrl.backends.verl.rayjob import rayjob_name
from mtrl.backends.verl.run_identity import POD_IDENTITY_KIND
from mtrl.contracts.backend import BackendError, CreatedResource, JobState, RunContext
from mtrl.kube.client import KubeClient
from mtrl.validation.dataset import DatasetValidator
from tests.unit.backends.aws_fakes import FakeAws, FakeCluster, Recorder, new_session
from tests.unit.backends.verl.fake_kube import RAY, FakeKube, serve
from tests.unit.backends.verl.verl_support import (
    IMAGE,
    MODEL,
    RUN_ID,
    TRAINER_ROLE_ARN,
    FakePodIdentity,
    publish_model_and_image,
    run_settings,
)

GROUPS = [{"name": "gpu", "instance_type": "ml.p5.48xlarge", "run_count": 2, "purpose": "training"}]
STEPS = 3
NAME = rayjob_name(RUN_ID)
JOB_ID = f"mtrl-verl/{NAME}"
JOB_PATH = f"{RAY}/namespaces/mtrl-verl/rayjobs/{NAME}"


class Clock:
    now = 1_795_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class World:
    adapter: VerlAdapter
    kube: FakeKube
    cluster: FakeCluster
    aws: FakeAws
    recorder: Recorder
    issued: list[str]
    settings: dict[str, Any]
    pod_identity: FakePodIdentity

    def run(self, **changes: Any) -> RunContext:
        context = RunContext(
            run_id=RUN_ID,
            settings=self.settings,
            dataset_uri=f"s3://data-bucket/runs/{RUN_ID}/data/train.jsonl",
            eval_dataset_uri=None,
            output_uri=f"s3://data-bucket/runs/{RUN_ID}/",
            resources=tuple(self.recorder.resources),
            record_resource=self.recorder,
        )
        return replace(context, **changes)

    def progress(self, step: int) -> None:
        body = json.dumps({"step": step, "planned_steps": STEPS})
        self.aws.session.client("s3").put_object(Bucket="data-bucket", Key=f"runs/{RUN_ID}/progress.json", Body=body)

    def submitted(self) -> str:
        self.cluster.target = self.cluster.current = 1
        return self.adapter.submit(self.run())


@pytest.fixture
def world(mocked_aws: None) -> Iterator[World]:
    session = new_session()
    aws = FakeAws(session)
    cluster = FakeCluster(aws, name="mtrl-hyperpod", group="gpu")
    pod_identity = FakePodIdentity(aws)
    session.client("s3").create_bucket(Bucket="data-bucket")
    publish_model_and_image(session)
    fake = FakeKube(valid_tokens={"token-1"})
    counter = itertools.count(1)
    issued: list[str] = []

    def token() -> str:
        issued.append(f"token-{next(counter)}")
        return issued[-1]

    with serve(fake):
        client = KubeClient(fake.url, token=token)
        settings = run_settings(
            {"hyperpod_instance_groups": GROUPS}, {"instance_count": 1, "backend_options": {"steps": STEPS}}
        )
        adapter = VerlAdapter(AwsClients(session), kube=lambda _config: client, clock=Clock())
        yield World(adapter, fake, cluster, aws, Recorder(), issued, settings, pod_identity)


def test_a_run_end_to_end_scales_submits_once_succeeds_and_releases(world: World) -> None:
    findings = world.adapter.preflight(world.run())
    assert all(f.ok for f in findings), findings
    with pytest.raises(ProvisioningInProgress, match="GPU nodes 0/1 Running in gpu"):
        world.adapter.provision(world.run())
    assert world.cluster.target == 1
    world.cluster.arrive()
    (capacity,) = world.adapter.provision(world.run())
    assert capacity.kind == CAPACITY_KIND
    job_id = world.adapter.submit(world.run())
    assert job_id == JOB_ID
    assert world.adapter.submit(world.run()) == job_id  # 409: already submitted, not an error
    posted = [(p, s) for m, p, s in world.kube.requests if m == "POST" and "/rayjobs" in p]
    assert posted == [(f"{RAY}/namespaces/mtrl-verl/rayjobs?fieldValidation=Strict", status) for status in (201, 409)]
    assert world.adapter.status(world.run(), job_id).state is JobState.PENDING
    world.kube.set_status(JOB_PATH, jobDeploymentStatus="Running", jobStatus="RUNNING")
    world.progress(1)
    running = world.adapter.status(world.run(), job_id)
    assert running.state is JobState.RUNNING
    assert running.progress == {"step": 1, "total_steps": STEPS}
    # The GPU hours held so far, priced like a hyperpod run's, so the pipeline's budget guard can stop the run.
    clock = world.adapter._clock
    assert isinstance(clock, Clock)
    clock.now += 3600  # one hour of the one ml.p5.48xlarge (prices.json, us-east-1)
    assert world.adapter.status(world.run(), job_id).metrics["cost_usd"] == 98.32
    clock.now -= 3600
    world.kube.set_status(JOB_PATH, jobDeploymentStatus="Complete", jobStatus="SUCCEEDED")
    world.progress(STEPS)
    assert world.adapter.status(world.run(), job_id).state is JobState.SUCCEEDED
    # The fake answers 403 outside the Role (fake_kube.authorization), so every phase above and below ran within it.
    # Reading pod logs is an operator's access (kubectl or their own role), not the pipeline's (access.py).
    operator_only = {("list", "pods"), ("get", "pods/log")}
    world.kube.allowed |= operator_only
    assert "step 2" in world.adapter.logs(world.run(), job_id)
    world.kube.allowed -= operator_only
    kinds = [r.kind for r in world.recorder.resources]
    assert kinds == [POD_IDENTITY_KIND, CAPACITY_KIND, RAYJOB_KIND]  # recorded before they were created
    # The run's pods run as its own service account, which gets the trainer role narrowed to the run (issue 36
    # item 5): one association, made at Provision (it takes seconds to take effect) and only ensured at Submit,
    # with session tags off as a session policy requires.
    assert f"/api/v1/namespaces/mtrl-verl/serviceaccounts/{NAME}" in world.kube.objects
    (association,) = world.pod_identity.associations.values()
    assert (association["namespace"], association["serviceAccount"]) == ("mtrl-verl", NAME)
    assert association["roleArn"] == TRAINER_ROLE_ARN
    assert association["disableSessionTags"] is True
    statements = {s["Sid"]: s for s in json.loads(association["policy"])["Statement"]}
    assert statements["RunPrefix"]["Resource"] == f"arn:aws:s3:::data-bucket/runs/{RUN_ID}/*"
    world.kube.cluster_linger_reads = 1
    with pytest.raises(BackendError, match="still being deleted") as lingering:
        world.adapter.cleanup(world.run())
    assert lingering.value.transient
    assert world.cluster.target == 1  # GPUs are not pulled from under a live Ray cluster
    removed = world.adapter.cleanup(world.run())
    assert {r.kind for r in removed} == {CAPACITY_KIND, RAYJOB_KIND, POD_IDENTITY_KIND}
    assert world.pod_identity.associations == {}
    assert f"/api/v1/namespaces/mtrl-verl/serviceaccounts/{NAME}" not in world.kube.objects
    assert world.cluster.target == 0
    assert JOB_PATH not in world.kube.objects
    assert world.adapter.cleanup(world.run())  # idempotent: 404s are fine, the group is already idle
    used = set(world.kube.checked) - operator_only
    assert used <= {(verb, resource) for verb, _, resource in REQUIRED_ACCESS}
    assert {("create", "rayjobs"), ("get", "rayjobs"), ("delete", "configmaps"), ("list", "rayclusters")} <= used


@pytest.mark.parametrize(
    ("deployment", "job", "step", "state"),
    [
        ("", "", None, JobState.PENDING),
        ("Initializing", "PENDING", None, JobState.PENDING),
        ("Waiting", "", None, JobState.PENDING),
        ("Suspending", "", None, JobState.PENDING),
        ("Suspended", "", None, JobState.PENDING),
        ("Running", "RUNNING", 1, JobState.RUNNING),
        ("Retrying", "PENDING", None, JobState.RUNNING),
        ("Failed", "FAILED", 1, JobState.FAILED),
        ("Failed", "RUNNING", 2, JobState.FAILED),  # kuberay #2314: jobStatus lies
        ("ValidationFailed", "", None, JobState.FAILED),
        ("Complete", "SUCCEEDED", STEPS, JobState.SUCCEEDED),
        ("Complete", "SUCCEEDED", 0, JobState.FAILED),  # verl #5725: a clean exit after 0 steps
        ("Complete", "SUCCEEDED", None, JobState.FAILED),
        ("Complete", "SUCCEEDED", STEPS - 1, JobState.FAILED),
        ("Complete", "STOPPED", 1, JobState.STOPPED),
        ("Complete", "FAILED", 1, JobState.FAILED),
        ("SomethingNew", "RUNNING", None, JobState.RUNNING),
    ],
)
def test_every_deployment_status_maps_to_a_run_state(
    world: World, deployment: str, job: str, step: int | None, state: JobState
) -> None:
    job_id = world.submitted()
    world.kube.set_status(JOB_PATH, jobDeploymentStatus=deployment, jobStatus=job, reason="AppFailed")
    if step is not None:
        world.progress(step)
    status = world.adapter.status(world.run(), job_id)
    assert status.state is state, status
    if deployment == "Complete" and job == "SUCCEEDED" and state is JobState.FAILED:
        assert f"of {STEPS} planned steps" in status.message


def test_an_expired_token_is_refreshed_once(world: World) -> None:
    job_id = world.submitted()
    world.kube.valid_tokens = {"token-2"}  # token-1 expired
    assert world.adapter.status(world.run(), job_id).state is JobState.PENDING
    assert world.issued == ["token-1", "token-2"]
    assert [s for _m, p, s in world.kube.requests if p == JOB_PATH][-2:] == [401, 200]
    world.kube.valid_tokens = set()  # refused whatever the token: one retry, then a plain error
    with pytest.raises(BackendError, match="401"):
        world.adapter.status(world.run(), job_id)
    assert world.issued == ["token-1", "token-2", "token-3"]


def test_a_rayjob_deleted_behind_the_pipeline_fails_the_run_and_cancel_tolerates_it(world: World) -> None:
    job_id = world.submitted()
    world.adapter.cancel(world.run(), job_id)
    assert JOB_PATH not in world.kube.objects
    world.adapter.cancel(world.run(), job_id)  # 404: already gone
    with pytest.raises(BackendError, match=f"run {RUN_ID}: RayJob {JOB_ID} no longer exists"):
        world.adapter.status(world.run(), job_id)


@pytest.mark.parametrize("job_id", ["mtrl-verl/other-object", "mtrl-verl", "/mtrl-0123456789abcdef", "ns/mtrl-XYZ"])
def test_a_job_id_addresses_only_a_verl_rayjob(world: World, job_id: str) -> None:
    with pytest.raises(BackendError, match="is not a verl job id"):
        world.adapter.status(world.run(), job_id)


def test_preflight_says_when_kuberay_is_missing(world: World) -> None:
    world.kube.kuberay_installed = False
    findings = {f.check: f for f in world.adapter.preflight(world.run())}
    assert not findings["kuberay"].ok
    assert "KubeRay is not installed" in findings["kuberay"].message


def test_preflight_names_what_the_role_may_not_do(world: World) -> None:
    world.kube.allowed = {(verb, resource) for verb, _, resource in REQUIRED_ACCESS} - {
        ("create", "rayjobs"),
        ("list", "rayclusters"),
    }
    findings = {f.check: f for f in world.adapter.preflight(world.run())}
    assert not findings["kubernetes-access"].ok
    assert "may not create rayjobs, list rayclusters in namespace mtrl-verl" in findings["kubernetes-access"].message


def test_preflight_asks_about_exactly_the_verbs_the_role_grants(world: World) -> None:
    # The Role the cluster stack installs is rendered from the same table (tests/unit/stacks/test_kuberay.py checks
    # the template): every granted verb is asked about once, and nothing that is not granted.
    world.adapter.preflight(world.run())
    (role,) = [m for m in namespace_manifests("mtrl-verl") if m["kind"] == "Role"]
    granted = {
        (verb, group, resource)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    asked = [(b["verb"], b["group"], b["resource"]) for b in world.kube.reviews]
    assert sorted(asked) == sorted(granted)
    assert len(asked) == len(set(asked))
    assert {b["namespace"] for b in world.kube.reviews} == {"mtrl-verl"}


def test_preflight_refuses_a_group_another_run_holds(world: World) -> None:
    world.cluster.target = 1
    findings = {f.check: f for f in world.adapter.preflight(world.run())}
    assert not findings["gpu-group"].ok
    assert "another run holds it" in findings["gpu-group"].message


def test_preflight_checks_the_model_copy_against_its_pinned_checksum(world: World) -> None:
    findings = {f.check: f for f in world.adapter.preflight(world.run())}
    assert findings["model"].ok, findings["model"]
    assert "qwen/SHA256SUMS matches its pinned SHA-256" in findings["model"].message
    s3 = world.aws.session.client("s3")
    s3.put_object(Bucket="models-bucket", Key="qwen/SHA256SUMS", Body=b"changed after the pin\n")
    changed = {f.check: f for f in world.adapter.preflight(world.run())}["model"]
    assert not changed.ok
    assert f"pins {MODEL['sha256'][:12]}" in changed.message
    assert RUN_ID in changed.message
    s3.delete_object(Bucket="models-bucket", Key="qwen/SHA256SUMS")
    gone = {f.check: f for f in world.adapter.preflight(world.run())}["model"]
    assert not gone.ok
    assert "s3://models-bucket/qwen/SHA256SUMS: NoSuchKey" in gone.message


def test_preflight_checks_the_image_is_in_ecr(world: World) -> None:
    assert {f.check: f for f in world.adapter.preflight(world.run())}["image"].ok
    world.aws.session.client("ecr").batch_delete_image(
        repositoryName="verl-trainer", imageIds=[{"imageDigest": IMAGE.split("@")[1]}]
    )
    missing = {f.check: f for f in world.adapter.preflight(world.run())}["image"]
    assert not missing.ok
    assert "ImageNotFoundException (build and push docker/verl-trainer" in missing.message


def test_an_image_outside_ecr_is_not_checked_and_says_so(world: World) -> None:
    settings = {**world.settings, "verl_image_uri": "ghcr.io/example/verl-trainer:0.9.1"}
    image = {f.check: f for f in world.adapter.preflight(world.run(settings=settings))}["image"]
    assert image.ok
    assert "not in ECR, not checked" in image.message


def test_preflight_of_a_run_beyond_the_ceilings_touches_nothing(world: World) -> None:
    settings = {**world.settings, "steps": 10**4}
    (finding,) = world.adapter.preflight(world.run(settings=settings))
    assert not finding.ok
    assert "verl_max_steps" in finding.message
    assert world.kube.requests == []
    assert world.aws.calls == []


def test_the_default_client_comes_from_describe_cluster_and_a_presigned_token(mocked_aws: None) -> None:
    session = new_session()
    eks = session.client("eks")
    eks.create_cluster(
        name="mtrl-eks",
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": ["subnet-1"]},
    )
    endpoint = eks.describe_cluster(name="mtrl-eks")["cluster"]["endpoint"]
    settings = run_settings({"hyperpod_instance_groups": GROUPS})
    adapter = VerlAdapter(AwsClients(session))
    client = adapter._kube(parse_config(settings))
    assert client.endpoint == endpoint.rstrip("/")
    assert client._bearer().startswith("k8s-aws-v1.")
    # moto's CA is no certificate: the first request says so plainly instead of failing the TLS setup.
    with pytest.raises(BackendError, match="CA certificate is unusable"):
        adapter.status(RunContext(RUN_ID, settings, "s3://b/k", None, f"s3://b/runs/{RUN_ID}/"), JOB_ID)


# -- a 409 adopts only this run's objects; DELETE goes only to this run's objects in the deployment's namespace ------


def _plant(world: World, *, run_id: str, deployment: str, kinds: tuple[str, ...] = ("ConfigMap", "RayJob")) -> None:
    """Objects of this run's name that someone else created (another run, another deployment, or by hand)."""
    metadata = {
        "name": NAME,
        "namespace": "mtrl-verl",
        "labels": {"mtrl/deployment": deployment},
        "annotations": {"mtrl/run-id": run_id},
    }
    paths = {"ConfigMap": f"/api/v1/namespaces/mtrl-verl/configmaps/{NAME}", "RayJob": JOB_PATH}
    for kind in kinds:
        world.kube.objects[paths[kind]] = {"kind": kind, "metadata": metadata, "status": {}}


@pytest.mark.parametrize(
    ("run_id", "deployment", "kinds"),
    [
        ("another-run", "mtrl", ("ConfigMap", "RayJob")),
        (RUN_ID, "another-deployment", ("ConfigMap", "RayJob")),
        ("", "", ("RayJob",)),  # made by hand: no annotation, no label
        ("another-run", "mtrl", ("ConfigMap",)),
    ],
)
def test_a_409_on_another_runs_object_is_refused_and_never_deleted(
    world: World, run_id: str, deployment: str, kinds: tuple[str, ...]
) -> None:
    _plant(world, run_id=run_id, deployment=deployment, kinds=kinds)
    planted = dict(world.kube.objects)
    with pytest.raises(BackendError, match=f"run {RUN_ID}: a .* named {JOB_ID} already exists and is not this run's"):
        world.submitted()
    # The pipeline then cancels and cleans up the run: the other objects survive both.
    world.adapter.cancel(world.run(), JOB_ID)
    world.adapter.cleanup(world.run())
    assert {path: world.kube.objects.get(path) for path in planted} == planted
    assert not [request for request in world.kube.requests if request[0] == "DELETE" and request[1] in planted]


def test_a_409_on_this_runs_own_objects_is_adopted_and_cleaned_up(world: World) -> None:
    job_id = world.submitted()
    assert world.adapter.submit(world.run()) == job_id  # the retry of a submit that did create them
    world.adapter.cleanup(world.run())
    assert JOB_PATH not in world.kube.objects


@pytest.mark.parametrize("namespace", ["kube-system", "default", "mtrl-verl-other"])
def test_cancel_and_cleanup_never_delete_in_another_namespace(world: World, namespace: str) -> None:
    foreign = f"{namespace}/{NAME}"
    world.kube.objects[f"{RAY}/namespaces/{namespace}/rayjobs/{NAME}"] = {"kind": "RayJob", "metadata": {}}
    with pytest.raises(BackendError, match="not in the deployment's namespace mtrl-verl; nothing was deleted"):
        world.adapter.cancel(world.run(), foreign)
    world.recorder(CreatedResource(RAYJOB_KIND, foreign, {"namespace": namespace, "name": NAME}))
    with pytest.raises(BackendError, match="not in the deployment's namespace mtrl-verl; nothing was deleted"):
        world.adapter.cleanup(world.run())
    assert not [request for request in world.kube.requests if request[0] == "DELETE"]


# -- rows longer than the run's prompt length fail Preflight, naming their lines (issue 38 item 5) -------------------


def _rows(prompts: list[Any]) -> bytes:
    return b"".join(
        json.dumps({"id": f"r{i}", "metadata": {"prompt": prompt}}).encode() + b"\n" for i, prompt in enumerate(prompts)
    )


def _validated(world: World, train: bytes, held_out: bytes | None = None) -> None:
    """validation.json as the pipeline's Validate writes it (the real validator, measuring the prompts)."""
    reports: dict[str, Any] = {}
    for name, body, source in (("train", train, "s3://data/training-data/t.jsonl"), ("eval", held_out, "eval.jsonl")):
        if body is not None:
            report = DatasetValidator(measure_prompts=True).validate(io.BytesIO(body), source=source)
            assert report.valid, report.errors
            reports[name] = report.to_dict()
    world.aws.session.client("s3").put_object(
        Bucket="data-bucket", Key=f"runs/{RUN_ID}/validation.json", Body=json.dumps({"run_id": RUN_ID, **reports})
    )


def _prompt_finding(world: World) -> Any:
    (finding,) = [f for f in world.adapter.preflight(world.run()) if f.check == "prompt-length"]
    return finding


LIMIT = 1024  # verl_prompt_length, the run's max_prompt_length by default


@pytest.mark.parametrize(
    ("prompts", "lines"),
    [
        (["short", "w " * (LIMIT + 1), "short", "x " * 5000], [4, 2]),  # plain text, longest first
        (["short", [{"role": "user", "content": "w " * LIMIT}]], [2]),  # a message list: its JSON text is tokenized
        (["a\tb\nc " * 400], [1]),  # any whitespace separates words
    ],
)
def test_rows_that_cannot_fit_the_prompt_length_fail_preflight_naming_their_lines(
    world: World, prompts: list[Any], lines: list[int]
) -> None:
    _validated(world, _rows(prompts))
    finding = _prompt_finding(world)
    assert not finding.ok
    assert f"cannot fit max_prompt_length {LIMIT} tokens" in finding.message
    named = [int(part.split(" line ")[1].split(" ")[0]) for part in finding.message.split("; ")]
    assert named == lines
    assert f"run {RUN_ID}:" in finding.message


def test_held_out_rows_are_checked_too_and_rows_that_fit_pass(world: World) -> None:
    fits = _rows(["w " * LIMIT, "short"])  # exactly the limit: at least 1024 tokens may still fit
    _validated(world, fits, held_out=_rows(["short", "short", "z " * 3000]))
    finding = _prompt_finding(world)
    assert not finding.ok
    assert "eval.jsonl line 3 (≥ 3000 tokens)" in finding.message
    _validated(world, fits)
    assert _prompt_finding(world).ok
    settings = run_settings(
        {"hyperpod_instance_groups": GROUPS},
        {"instance_count": 1, "backend_options": {"steps": STEPS, "max_prompt_length": 512}},
    )
    (lower,) = [f for f in world.adapter.preflight(world.run(settings=settings)) if f.check == "prompt-length"]
    assert not lower.ok
    assert "max_prompt_length 512" in lower.message
