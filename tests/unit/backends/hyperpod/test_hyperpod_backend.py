"""The hyperpod adapter: GPU scale-up/readiness/scale-down on a model-validated fake HyperPod cluster, reward workers
and the Nova Forge runner on moto ECS, runner results and the per-run stack on moto S3/CloudFormation."""

from __future__ import annotations

import fnmatch
import json
import re
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from aws_fakes import REGION

from mtrl.backends._aws import AwsClients
from mtrl.backends.hyperpod import (
    CAPACITY_KIND,
    STACK_KIND,
    TASKS_KIND,
    HyperPodAdapter,
    ProvisioningInProgress,
    cloudformation_stack_name,
    group_spec,
    parse_settings,
    run_name_pattern,
    run_stack_base,
    sdk_stack_name,
)
from mtrl.backends.pricing import budget_finding
from mtrl.contracts.backend import BackendError, CreatedResource, JobState
from mtrl.cost import load_price_book
from mtrl.worker import contract
from mtrl.worker.__main__ import config_from_env
from tests.unit.backends.hyperpod.hyperpod_world import BUCKET, PACKAGE_URIS, SETUP_OUTPUTS, Shared, World

# -- GPU capacity --------------------------------------------------------------------------------------------------


def test_scale_up_records_first_and_changes_only_the_count(world: World) -> None:
    recorded_at_update: list[list[str]] = []
    world.cluster.on_update = lambda _p: recorded_at_update.append([r.kind for r in world.recorder.resources])
    with pytest.raises(ProvisioningInProgress, match="GPU nodes 0/2 Running"):
        world.adapter.provision(world.run())
    assert recorded_at_update == [[CAPACITY_KIND]]  # recorded before UpdateCluster
    (update,) = world.cluster.updates
    assert update["ClusterName"] == "mtrl-hp"
    (spec,) = update["InstanceGroups"]  # only the GPU group, never the system group
    assert spec == {
        "InstanceCount": 2,
        "MinInstanceCount": 0,
        "InstanceGroupName": "gpu",
        "InstanceType": "ml.p5.48xlarge",
        "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/scripts/", "OnCreate": "on_create.sh"},
        "ExecutionRole": "arn:aws:iam::123456789012:role/mtrl-hyperpod-nodes",
        "ThreadsPerCore": 1,
        "InstanceStorageConfigs": [{"EbsVolumeConfig": {"VolumeSizeInGB": 500}}],
        "OnStartDeepHealthChecks": ["InstanceStress"],
        "OverrideVpcConfig": {"SecurityGroupIds": ["sg-0123"], "Subnets": ["subnet-0123"]},
        "ImageId": "ami-0aaa",
        "KubernetesConfig": {
            "Labels": {"mtrl/role": "gpu"},
            "Taints": [{"Key": "nvidia.com/gpu", "Value": "true", "Effect": "NoSchedule"}],
        },
    }
    capacity = world.recorder.resources[0]
    assert capacity.details["target_count"] == 2
    assert capacity.details["idle_count"] == 0
    assert capacity.details["instance_type"] == "ml.p5.48xlarge"


def test_restricted_group_spec_drops_reported_only_fields(shared: Shared) -> None:
    world = World(shared, restricted=True)
    with pytest.raises(ProvisioningInProgress):
        world.adapter.provision(world.run())
    (spec,) = world.cluster.updates[0]["RestrictedInstanceGroups"]
    assert spec["EnvironmentConfig"] == {"FSxLustreConfig": {"SizeInGiB": 1200, "PerUnitStorageThroughput": 250}}
    assert spec["InstanceCount"] == 2
    assert "InstanceGroups" not in world.cluster.updates[0]


def test_in_service_cluster_without_gpu_nodes_is_not_ready(world: World) -> None:
    with pytest.raises(ProvisioningInProgress):
        world.adapter.provision(world.run())
    world.cluster.arrive(capacity=False)  # continuous provisioning: InService, zero GPU nodes
    world.runner_finishes("setup", SETUP_OUTPUTS)
    with pytest.raises(ProvisioningInProgress, match="GPU nodes 0/2 Running"):
        world.adapter.provision(world.run())
    assert len(world.cluster.updates) == 1  # the request is not repeated


def test_capacity_that_never_arrives_fails_after_the_bound(world: World) -> None:
    with pytest.raises(ProvisioningInProgress):
        world.adapter.provision(world.run())
    world.cluster.arrive(capacity=False)
    world.clock.now += 31 * 60
    with pytest.raises(BackendError, match=r"did not arrive within 30 minutes \(0/2 nodes Running\)") as caught:
        world.adapter.provision(world.run())
    assert not caught.value.transient


def test_in_call_wait_is_bounded_by_wait_seconds(world: World) -> None:
    adapter = HyperPodAdapter(
        AwsClients(world.aws.session), clock=world.clock, sleep=world._sleep, wait_seconds=120, poll_seconds=30
    )
    start = world.clock.now
    with pytest.raises(ProvisioningInProgress):
        adapter.provision(world.run())
    assert world.clock.now - start == 120


def test_capacity_error_events_are_reported_in_plain_words(world: World) -> None:
    with pytest.raises(ProvisioningInProgress):
        world.adapter.provision(world.run())
    world.cluster.events = [
        {
            "EventId": "e1",
            "ClusterArn": world.cluster.arn,
            "ClusterName": "mtrl-hp",
            "InstanceGroupName": "gpu",
            "ResourceType": "InstanceGroup",
            "EventTime": datetime.fromtimestamp(world.clock.now, UTC),
            "Description": "Insufficient capacity: InsufficientInstanceCapacity for ml.p5.48xlarge in use1-az6",
            "EventLevel": "Error",
        }
    ]
    with pytest.raises(BackendError, match=r"GPU capacity for 2 × ml\.p5\.48xlarge in gpu is not available") as caught:
        world.adapter.provision(world.run())
    assert "quota increase" in str(caught.value)
    assert not caught.value.transient


def test_another_update_in_progress_is_waited_for_not_fought(world: World) -> None:
    world.cluster.status = "Updating"  # someone else's change (e.g. a software update)
    with pytest.raises(ProvisioningInProgress, match="cluster mtrl-hp is Updating") as caught:
        world.adapter.provision(world.run())
    assert caught.value.transient
    assert world.cluster.updates == []


def test_group_spec_uses_the_service_model() -> None:
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    spec = group_spec(
        model,
        "InstanceGroups",
        {"InstanceGroupName": "g", "ExecutionRole": "r", "MinCount": 3, "CurrentCount": 5, "Status": "InService"},
        1,
    )
    assert spec == {"InstanceGroupName": "g", "ExecutionRole": "r", "MinInstanceCount": 1, "InstanceCount": 1}


# -- Nova runner, workers, submit, status ---------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["mtrl", "abcdefg", "a-very-long-prefix20"])
def test_sdk_stack_names_fit_the_sdk_limits_and_stay_in_the_iam_pattern(prefix: str) -> None:
    # Defect 1 (issue 10): validate_stack_name (amzn_nova_forge.validation.rft_multiturn_validator) caps the base
    # name and <base>-NovaForgeSDK at 32 characters; the old <prefix>-run-<run id> was 36+.
    run_ids = ["r1", "2026-12-01T10-00-00-" + "x" * 60, str(uuid.uuid4())]
    names = [run_stack_base(prefix, run_id) for run_id in run_ids]
    for name in names:
        assert len(name) <= 19
        assert len(f"{name}-NovaForgeSDK") <= 32
        assert re.fullmatch(r"[a-zA-Z][a-zA-Z0-9-]*", name)  # the SDK's character rule
        assert fnmatch.fnmatchcase(name, run_name_pattern(prefix))
        assert fnmatch.fnmatchcase(f"{name}-NovaForgeSDK-SageMaker-proxy", run_name_pattern(prefix))
    assert len(set(names)) == len(names)  # distinct per run
    assert names == [run_stack_base(prefix, run_id) for run_id in run_ids]  # stable per run
    # The pattern never covers the deployment's own resources.
    for own in ("rft", "reward-workers", "runs", "run-ended-abnormally", "nova-runner", "pipeline"):
        assert not fnmatch.fnmatchcase(f"{prefix}-{own}", run_name_pattern(prefix))


def test_the_stack_name_recorded_on_the_run_wins_over_the_current_scheme(world: World) -> None:
    # A run recorded by an older release keeps its stack name: the spec and the cleanup both use the record.
    world.recorder(CreatedResource(STACK_KIND, "mtrl-old-NovaForgeSDK", {"sdk_stack_name": "mtrl-old"}))
    with pytest.raises(ProvisioningInProgress):
        world.adapter.provision(world.run())
    spec = json.loads(
        world.aws.session.client("s3")
        .get_object(Bucket=BUCKET, Key=f"runs/{world.run_id}/backend/spec.json")["Body"]
        .read()
    )
    assert spec["stack_name"] == "mtrl-old"
    assert [r.identifier for r in world.recorder.resources if r.kind == STACK_KIND] == ["mtrl-old-NovaForgeSDK"]


def test_full_provision_starts_runner_then_workers_with_the_run_settings(world: World) -> None:
    held = world.provision_until_ready()
    assert {r.kind for r in held} >= {CAPACITY_KIND, TASKS_KIND, STACK_KIND}
    stack = next(r for r in world.recorder.resources if r.kind == STACK_KIND)
    assert stack.identifier == f"{sdk_stack_name(parse_settings(world.settings()), world.run_id)}-NovaForgeSDK"
    assert fnmatch.fnmatchcase(stack.identifier, run_name_pattern("mtrl"))  # inside the runner's IAM scope
    spec = json.loads(
        world.aws.session.client("s3")
        .get_object(Bucket=BUCKET, Key=f"runs/{world.run_id}/backend/spec.json")["Body"]
        .read()
    )
    assert spec["stack_name"] + "-NovaForgeSDK" == stack.identifier
    assert spec["environment"] == "wordle"
    assert spec["overrides"] == {"max_steps": 10}
    runner_task = world.ecs.describe_tasks(
        cluster=world.ecs_cluster, tasks=world.tasks("nova-runner-setup", status="STOPPED")
    )["tasks"][0]
    assert runner_task["overrides"]["containerOverrides"][0]["command"] == [
        "setup",
        "--spec",
        f"s3://{BUCKET}/runs/{world.run_id}/backend/spec.json",
    ]
    workers = world.tasks("reward-workers")
    assert len(workers) == 2
    env = {
        e["name"]: e["value"]
        for e in world.ecs.describe_tasks(cluster=world.ecs_cluster, tasks=workers[:1])["tasks"][0]["overrides"][
            "containerOverrides"
        ][0]["environment"]
    }
    assert env[contract.ENV_ID] == "wordle"
    assert json.loads(env[contract.ENV_ARGS]) == {"max_turns": 6}
    assert env[contract.REQUEST_QUEUE_URL] == SETUP_OUTPUTS["rollout_request_queue_url"]
    assert env[contract.RESULT_QUEUE_URL] == SETUP_OUTPUTS["rollout_response_sqs_url"]
    assert env[contract.POLICY_URL] == SETUP_OUTPUTS["proxy_function_url"]
    # The worker's own entry point reads exactly what the backend wrote.
    assert config_from_env(env).env_args == {"max_turns": 6}
    # A further call is a no-op: nothing scaled, started or recorded twice.
    count = len(world.recorder.resources)
    world.adapter.provision(world.run())
    assert len(world.tasks("reward-workers")) == 2
    assert len(world.recorder.resources) == count
    assert len(world.cluster.updates) == 1


def _spec(world: World) -> dict[str, Any]:
    key = f"runs/{world.run_id}/backend/spec.json"
    return json.loads(world.aws.session.client("s3").get_object(Bucket=BUCKET, Key=key)["Body"].read())  # type: ignore[no-any-return]


@pytest.mark.parametrize("env_id", sorted(PACKAGE_URIS))
def test_the_runner_spec_carries_the_package_of_the_runs_environment(world: World, env_id: str) -> None:
    # Issue 10 defect 7: the runner builds CustomEnvironment(env_id, s3_uri=…) from custom_env_s3_uri, so each run
    # gets its own environment's package, never one deployment-wide URI.
    with pytest.raises(ProvisioningInProgress):
        world.adapter.provision(world.run(environment=env_id))  # starts the runner's setup with the spec
    spec = _spec(world)
    assert spec["environment"] == env_id
    assert spec["custom_env_s3_uri"] == PACKAGE_URIS[env_id]


def test_an_environment_without_a_package_fails_before_any_capacity_is_requested(world: World) -> None:
    run = world.run(environment="terminalbench_env")
    expected = (
        rf"run {world.run_id}: environment 'terminalbench_env' has no Nova Forge package in this deployment "
        r"\(packaged: ask_to_code, wordle\)"
    )
    with pytest.raises(BackendError, match=expected) as raised:
        world.adapter.provision(run)
    assert not raised.value.transient
    assert world.cluster.updates == []  # no UpdateCluster: no GPU was asked for
    assert world.recorder.resources == []  # nothing recorded, nothing started
    finding = {f.check: f for f in world.adapter.preflight(run)}["environment-package"]
    assert not finding.ok
    assert "terminalbench_env" in finding.message


def test_package_entries_are_checked(world: World) -> None:
    with pytest.raises(BackendError, match="entries are '<env_id>=s3://"):
        parse_settings(world.settings(nova_env_package_uris=["wordle=https://x/y.tar.gz"]))
    with pytest.raises(BackendError, match="more than one package"):
        parse_settings(world.settings(nova_env_package_uris=["w=s3://b/a.tar.gz", "w=s3://b/c.tar.gz"]))


def test_runner_reported_failure_stops_provisioning(world: World) -> None:
    with pytest.raises(ProvisioningInProgress):
        world.adapter.provision(world.run())
    world.runner_finishes(
        "setup", {"error": "AccessDenied: s3:HeadObject on the starter kit (no Nova Forge subscription)"}, ok=False
    )
    with pytest.raises(BackendError, match="Nova Forge setup failed: AccessDenied") as caught:
        world.adapter.provision(world.run())
    assert not caught.value.transient


def test_runner_that_dies_without_a_result_is_an_error(world: World) -> None:
    with pytest.raises(ProvisioningInProgress):
        world.adapter.provision(world.run())
    for arn in world.tasks("nova-runner-setup"):
        world.ecs.stop_task(cluster=world.ecs_cluster, task=arn, reason="Essential container exited")
    with pytest.raises(BackendError, match="stopped without writing a result: Essential container exited"):
        world.adapter.provision(world.run())


def test_submit_then_status(world: World) -> None:
    world.provision_until_ready()
    with pytest.raises(BackendError, match="submission in progress") as caught:
        world.adapter.submit(world.run())
    assert caught.value.transient
    assert len(world.tasks("nova-runner-submit")) == 1
    with pytest.raises(BackendError):
        world.adapter.submit(world.run())
    assert len(world.tasks("nova-runner-submit")) == 1  # a retry never starts a second submission
    world.runner_finishes("submit", {"job_name": "mtrl-abc"})
    job = world.adapter.submit(world.run())
    assert job == "mtrl-abc"

    pending = world.adapter.status(world.run(), job)
    assert pending.state is JobState.PENDING
    assert len(world.tasks("nova-runner-status")) == 1
    world.clock.now += 1800  # half an hour into training
    world.runner_finishes("status", {"job_name": job, "state": "Running", "message": "Running", "step": 3})
    running = world.adapter.status(world.run(), job)
    assert running.state is JobState.RUNNING
    assert running.progress == {"step": 3}
    # 2 × ml.p5.48xlarge held since the scale-up request, priced from prices.json (the budget guard reads it).
    hourly = load_price_book().instance_price("ml.p5.48xlarge", REGION).hourly
    requested = datetime.fromisoformat(world.recorder.resources[0].details["requested_at"]).timestamp()
    assert world.clock.now - requested == 1800
    assert running.metrics["cost_usd"] == pytest.approx(round(2 * hourly * 0.5, 2))
    assert world.tasks("nova-runner-status") == []  # fresh report: no new status task
    world.clock.now += 120
    world.adapter.status(world.run(), job)
    assert len(world.tasks("nova-runner-status")) == 1  # stale: refreshed
    world.runner_finishes("status", {"job_name": job, "state": "Failed", "message": "OOMKilled"})
    failed = world.adapter.status(world.run(), job)
    assert failed.state is JobState.FAILED
    assert failed.message == "OOMKilled"


def test_cancel_waits_for_the_runner_and_reports_its_failure(world: World) -> None:
    world.provision_until_ready()
    with pytest.raises(BackendError, match="cancelling HyperPod job mtrl-abc in progress") as caught:
        world.adapter.cancel(world.run(), "mtrl-abc")
    assert caught.value.transient
    assert len(world.tasks("nova-runner-cancel")) == 1
    waiting = HyperPodAdapter(AwsClients(world.aws.session), clock=world.clock, sleep=world._sleep)
    start = world.clock.now
    with pytest.raises(BackendError):
        waiting.cancel(world.run(hyperpod_wait_seconds=60), "mtrl-abc")  # the run's own in-call wait
    assert world.clock.now - start == 60
    assert len(world.tasks("nova-runner-cancel")) == 1  # never a second cancel task
    world.runner_finishes("cancel", {"error": "hyperpod cancel-job exited 1: not found"}, ok=False)
    with pytest.raises(BackendError, match="Nova Forge cancel failed") as failed:
        world.adapter.cancel(world.run(), "mtrl-abc")
    assert not failed.value.transient


def test_preflight_refuses_a_group_that_is_not_a_restricted_instance_group(world: World) -> None:
    # Issue 20 item 4. The Nova Forge SDK checks, before it starts the job, that the cluster has a restricted instance
    # group of the job's instance type with enough nodes (amzn_nova_forge 1.4.10, validation/validator.py,
    # _validate_infrastructure: only DescribeCluster's RestrictedInstanceGroups count). A run scaling a normal group
    # would pay for the scale-up and then be refused: preflight refuses it first, before any UpdateCluster.
    findings = {f.check: f for f in world.adapter.preflight(world.run())}
    refused = findings["restricted-group"]
    assert not refused.ok
    assert "'gpu' (ml.p5.48xlarge) is a normal instance group of cluster mtrl-hp" in refused.message
    assert "not available in restricted instance groups" in refused.message
    assert "restricted groups: none" in refused.message
    assert "hyperpod_restricted_instance_group" in refused.message
    assert world.cluster.updates == []  # nothing was scaled


def test_preflight_accepts_the_restricted_group_the_run_scales(rig_world: World) -> None:
    findings = {f.check: f for f in rig_world.adapter.preflight(rig_world.run())}
    assert findings["restricted-group"].ok
    assert findings["restricted-group"].message == "gpu (ml.p5.48xlarge) is a restricted instance group"


def test_preflight(rig_world: World) -> None:
    world = rig_world
    findings = {f.check: f for f in world.adapter.preflight(world.run())}
    assert all(f.ok for f in findings.values()), findings
    world.cluster.target = 2  # another run holds the group
    held = {f.check: f for f in world.adapter.preflight(world.run())}
    assert not held["gpu-group"].ok
    assert "another run holds it" in held["gpu-group"].message
    missing = {f.check: f for f in world.adapter.preflight(world.run(hyperpod_gpu_instance_group="gpu-x"))}
    assert not missing["cluster"].ok
    assert "no instance group 'gpu-x'" in missing["cluster"].message
    wrong = {f.check: f for f in world.adapter.preflight(world.run(reward_container_name="reward-worker"))}
    assert not wrong["task-definitions"].ok
    assert "no container 'reward-worker'" in wrong["task-definitions"].message
    ceiling = {f.check: f for f in world.adapter.preflight(world.run(hyperpod_max_instance_count=1, instance_count=2))}
    assert not ceiling["instance-count"].ok
    assert "instance_count 2 is above the run_count 1" in ceiling["instance-count"].message
    within = {f.check: f for f in world.adapter.preflight(world.run(hyperpod_max_instance_count=2, instance_count=2))}
    assert "instance-count" not in within
    # The budget is Preflight's own check (mtrl.backends.pricing.budget_finding), priced at the group's instance type
    # as the cluster describes it.
    assert world.adapter.gpu_instance_type(world.run()) == "ml.p5.48xlarge"
    priced = budget_finding(world.run(max_budget_usd=500.0, backend="hyperpod"), world.adapter)
    assert priced is not None
    assert priced.ok, priced
    unpriced = budget_finding(
        world.run(max_budget_usd=500.0, backend="hyperpod", region="ap-southeast-7"), world.adapter
    )
    assert unpriced is not None
    assert not unpriced.ok
    assert "max_budget_usd 500.0 cannot be enforced" in unpriced.message
    assert "no hourly price for 'ml.p5.48xlarge' in region 'ap-southeast-7'" in unpriced.message
    bad = world.adapter.preflight(world.run(task_subnet_ids=[]))
    assert len(bad) == 1
    assert not bad[0].ok
    assert "task_subnet_ids" in bad[0].message


@pytest.mark.parametrize("run_id", ["wordle", "Wordle_v3.2026-11-29T10:30:00Z", "x" * 300])
def test_per_run_stack_names_are_valid_and_prefixed(run_id: str) -> None:
    import re

    settings = parse_settings(
        {
            "region": REGION,
            "hyperpod_cluster_name": "c",
            "hyperpod_gpu_instance_group": "g",
            "instance_count": 1,
            "ecs_cluster_arn": "a",
            "task_subnet_ids": ["s"],
            "task_security_group_ids": ["g"],
            "reward_task_definition": "r",
            "reward_worker_run_boundary_arn": "b",
            "reward_worker_base_policy_arn": "p",
            "environment": "wordle",
            "nova_runner_task_definition": "n",
            "nova_rft_role_name": "mtrl-rft",
        }
    )
    name = cloudformation_stack_name(settings, run_id)
    assert re.fullmatch(r"[a-zA-Z][a-zA-Z0-9-]*", name)  # what the SDK and CloudFormation accept
    assert fnmatch.fnmatchcase(name, run_name_pattern("mtrl"))  # inside the runner role's CloudFormation scope
    assert len(name) <= 32  # the SDK's validate_stack_name limit
