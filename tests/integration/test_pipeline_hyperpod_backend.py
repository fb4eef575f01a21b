"""The real state machine and handlers driving the real ``hyperpod`` adapter (moto + model-validated SageMaker fakes).

What is real: the ASL, every handler, the ``HyperPodAdapter`` with its UpdateCluster/ListClusterNodes/ListClusterEvents
calls (request and response shapes validated against the SageMaker model), ECS RunTask/ListTasks/DescribeTasks/
StopTask and CloudFormation in moto, and the Nova Forge runner's own entry point (``nova_runner.main``: spec read from
S3, result written back) for every command. What stands in: the SDK inside the runner (``setup`` deploys a small
stack with the SDK's outputs, ``submit`` names the job) and the HyperPod CLI (a scripted ``get-job``), and the runner
task itself, which "runs" as soon as it is started. In every terminal path the GPU group is back at its idle count, no
task is left on the reward cluster, the per-run stack is deleted and the record marks every resource removed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from mtrl.backends._aws import AwsClients, S3Uri
from mtrl.backends.hyperpod import CAPACITY_KIND, STACK_KIND, TASKS_KIND, HyperPodAdapter, HyperPodSettings, nova_runner
from mtrl.contracts.backend import RunContext
from mtrl.envs.nova_package import build_package
from tests.integration.pipeline_support import Harness, jsonl, pipeline_context, wordle_rows
from tests.unit.backends.aws_fakes import (
    FakeAws,
    FakeCluster,
    FakeError,
    create_task_network,
    moto_ecs_tasks,
    new_session,
)

DATA = jsonl(wordle_rows(12))
SDK_STACK_TEMPLATE = {
    "Resources": {"RolloutQueue": {"Type": "AWS::SQS::Queue"}},
    "Outputs": {
        "RolloutQueueUrl": {"Value": {"Ref": "RolloutQueue"}},
        "RolloutFinishedQueueUrl": {"Value": {"Ref": "RolloutQueue"}},
        "ProxyFunctionUrl": {"Value": "https://proxy.lambda-url.us-east-1.on.aws/"},
    },
}


class SimulatedCluster(FakeCluster):
    """After a scale-up the nodes arrive on the ``arrival_polls``-th ListClusterNodes (or never, ``capacity=False``;
    the cluster still returns to InService, as continuous provisioning does). ``scale_down_conflicts`` scale-downs are
    refused with ConflictException first (an update someone else started)."""

    def __init__(self, aws: FakeAws, *, capacity: bool, arrival_polls: int, scale_down_conflicts: int) -> None:
        super().__init__(aws, restricted=True)  # Nova Forge trains on a restricted instance group (preflight)
        self.capacity, self.arrival_polls, self.scale_down_conflicts = capacity, arrival_polls, scale_down_conflicts
        self._polls = 0

    def _update(self, params: dict[str, Any]) -> dict[str, Any]:
        (spec,) = params["RestrictedInstanceGroups"]
        if spec["InstanceCount"] < self.target and self.scale_down_conflicts > 0:
            self.scale_down_conflicts -= 1
            self.updates.append(params)
            raise FakeError("ConflictException", f"Cluster {self.name} has an update in progress")
        result = super()._update(params)
        self._polls = 0
        return result

    def _nodes(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.status == "Updating":
            self._polls += 1
            if self._polls >= self.arrival_polls:
                self.arrive(capacity=self.capacity)
        return super()._nodes(params)


class FakeClock:
    """The adapter's clock: real time plus what its in-call waits 'slept' (starts an hour ahead, so every runner
    result written in real time is already older than the status refresh interval)."""

    def __init__(self) -> None:
        self.offset = 3600.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def sleep(self, seconds: float) -> None:
        self.offset += seconds


@dataclass
class HyperPodWorld:
    capacity: bool = True
    arrival_polls: int = 8  # more than one provision call waits in-process (300 s in 60 s polls)
    scale_down_conflicts: int = 0
    job_states: list[str] = field(default_factory=lambda: ["Running", "Succeeded"])
    aws: FakeAws = field(init=False)
    cluster: SimulatedCluster = field(init=False)
    clock: FakeClock = field(default_factory=FakeClock)
    adapter: HyperPodAdapter = field(init=False)
    cli_calls: list[list[str]] = field(default_factory=list)
    runner_commands: list[str] = field(default_factory=list)
    ecs_cluster: str = ""

    def __post_init__(self) -> None:
        self.aws = FakeAws(new_session())
        self.cluster = SimulatedCluster(
            self.aws,
            capacity=self.capacity,
            arrival_polls=self.arrival_polls,
            scale_down_conflicts=self.scale_down_conflicts,
        )
        self.adapter = RunnerSimulatingAdapter(self)

    # -- the deploy-time world (what the CDK stacks create), once moto is up ----------------------------------------
    def deploy(self) -> dict[str, Any]:
        subnet, sg, self.ecs_cluster = create_task_network(
            self.aws.session, cluster_name="mtrl-reward-workers", worker_container="reward-worker"
        )
        # The reward-worker stack's managed policies: every run's worker role is created under the boundary.
        iam = self.aws.session.client("iam")
        document = '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sqs:*", "Resource": "*"}]}'
        boundary = iam.create_policy(PolicyName="mtrl-reward-worker-run-boundary", PolicyDocument=document)
        base = iam.create_policy(PolicyName="mtrl-reward-worker-base", PolicyDocument=document)
        # The values hyperpod's stack side ships (stacks/backends/hyperpod/__init__.py), typed as it ships them.
        return {
            "prefix": "mtrl",
            "hyperpod_cluster_name": self.cluster.name,
            "hyperpod_gpu_instance_group": self.cluster.group,
            "hyperpod_idle_instance_count": 0,
            "hyperpod_capacity_timeout_minutes": 30,
            "hyperpod_wait_seconds": 300,
            "ecs_cluster_arn": self.ecs_cluster,
            "task_subnet_ids": [subnet],
            "task_security_group_ids": [sg],
            "reward_task_definition": "mtrl-reward-worker",
            "reward_container_name": "reward-worker",
            "reward_worker_run_boundary_arn": boundary["Policy"]["Arn"],
            "reward_worker_base_policy_arn": base["Policy"]["Arn"],
            "nova_runner_task_definition": "mtrl-nova-runner",
            "nova_runner_container_name": "runner",
            "nova_rft_role_name": "mtrl-rft",
            "nova_env_package_uris": [
                f"{env_id}=s3://mtrl-data-111122223333/{build_package(env_id).key}"
                for env_id in ("wordle", "ask_to_code")
            ],
        }

    # -- the Nova Forge runner container ----------------------------------------------------------------------------
    def run_container(self, run: RunContext, settings: HyperPodSettings, command: str) -> None:
        """What the started runner task does: ``python -m mtrl.backends.hyperpod.nova_runner <command> --spec …``."""
        self.runner_commands.append(command)
        spec_uri = str(S3Uri.parse(run.output_uri).join("backend", "spec.json"))
        session = self.aws.session
        saved = dict(nova_runner.HANDLERS)
        nova_runner.HANDLERS.update(
            setup=self._sdk_setup(session), submit=_sdk_submit, status=self._sdk_status, cancel=self._sdk_cancel
        )
        try:
            nova_runner.main([command, "--spec", spec_uri], session=session)
        finally:
            nova_runner.HANDLERS.clear()
            nova_runner.HANDLERS.update(saved)
        ecs = session.client("ecs")
        started_by = self.adapter._token(run, command)
        for arn in ecs.list_tasks(cluster=self.ecs_cluster, startedBy=started_by)["taskArns"]:
            ecs.stop_task(cluster=self.ecs_cluster, task=arn, reason="Essential container in task exited")

    def _sdk_setup(self, session: Any) -> Any:
        def setup(spec: dict[str, Any], context: nova_runner.Context) -> dict[str, Any]:
            # RFTMultiturnInfrastructure.setup() deploys <stack_name>-NovaForgeSDK; the outputs are read back for real.
            session.client("cloudformation").create_stack(
                StackName=f"{spec['stack_name']}-NovaForgeSDK", TemplateBody=json.dumps(SDK_STACK_TEMPLATE)
            )
            return nova_runner.stack_outputs(context.cloudformation, spec["stack_name"])

        return setup

    # The runner's status/cancel drive the SDK's SMHPStatusManager / SMHPRuntimeManager.cleanup, which run the
    # HyperPod CLI (tests/contract/test_nova_runner_contract.py runs them for real); here they are simulated.
    def _sdk_status(self, spec: dict[str, Any], context: nova_runner.Context) -> dict[str, Any]:
        name = nova_runner.recorded_job_name(spec, context)
        self.cli_calls.append(["hyperpod", "get-job", "--job-name", name])
        state = self.job_states.pop(0) if len(self.job_states) > 1 else self.job_states[0]
        return {"job_name": name, "state": state, "message": state}

    def _sdk_cancel(self, spec: dict[str, Any], context: nova_runner.Context) -> dict[str, Any]:
        name = nova_runner.recorded_job_name(spec, context)
        self.cli_calls.append(["hyperpod", "cancel-job", "--job-name", name, "--namespace", spec["namespace"]])
        return {"job_name": name, "cancelled": True}

    # -- what must be true after any terminal path ------------------------------------------------------------------
    def assert_released(self, pipeline: Harness, run_id: str) -> dict[str, Any]:
        assert self.cluster.target == 0, "GPU group not back at its idle count"
        ecs = self.aws.session.client("ecs")
        assert ecs.list_tasks(cluster=self.ecs_cluster, desiredStatus="RUNNING")["taskArns"] == []
        cfn = self.aws.session.client("cloudformation")
        live = [s for s in cfn.list_stacks()["StackSummaries"] if s["StackStatus"] != "DELETE_COMPLETE"]
        assert live == [], "per-run stack left behind"
        record = pipeline.record(run_id)
        assert record["finished_at"]
        assert record["resources"], "nothing was recorded"
        assert all("removed_at" in resource for resource in record["resources"]), record["resources"]
        assert pipeline.slots() == {"holders": {}, "queue": []}
        assert pipeline.object_json(f"runs/{run_id}/summary.json")["status"] == record["status"]
        return record


class RunnerSimulatingAdapter(HyperPodAdapter):
    """The real adapter; a runner task it starts runs to completion right away (as its container would)."""

    def __init__(self, world: HyperPodWorld) -> None:
        super().__init__(AwsClients(world.aws.session), clock=world.clock, sleep=world.clock.sleep, poll_seconds=60)
        self._world = world

    def run_runner(self, run: RunContext, settings: HyperPodSettings, command: Any, local: Any = None) -> None:
        already = bool(self._tasks(settings, self._token(run, command)))
        super().run_runner(run, settings, command, local)
        if not already:
            self._world.run_container(run, settings, command)


def _sdk_submit(spec: dict[str, Any], context: nova_runner.Context) -> dict[str, Any]:
    del context
    return {"job_name": nova_runner.job_name(spec)}  # ForgeTrainer.train(job_name=…) names the job


@pytest.fixture(scope="module", autouse=True)
def _moto_ecs_tasks() -> Iterator[None]:
    with moto_ecs_tasks():
        yield


def _pipeline(world: HyperPodWorld, **overrides: Any) -> Any:
    return pipeline_context(
        world.adapter, backend_name="hyperpod", backend_settings=world.deploy, run_backend="hyperpod", **overrides
    )


def _wait_for(pipeline: Harness, predicate: Any, timeout: float = 180.0) -> None:
    # A bound, not a duration: it returns as soon as the run gets there (30 s was too short on a loaded host).
    pipeline.wait_until(predicate, timeout)
    assert predicate()


def _job_state(pipeline: Harness, run_id: str) -> str | None:
    found = [run for run in pipeline.runs() if run["run_id"] == run_id]
    return found[0].get("job_state") if found else None


def test_hyperpod_run_succeeds_and_releases_everything() -> None:
    world = HyperPodWorld()
    with _pipeline(world) as pipeline:
        started = pipeline.upload_and_trigger("training-data/hp-ok.jsonl", DATA)
        execution = pipeline.wait(started["execution_arn"])
        assert execution["status"] == "SUCCEEDED", execution
        states = pipeline.entered_states(started["execution_arn"])
        assert states.count("WaitForProvision") >= 1  # the GPUs took more than one provisioning step
        record = world.assert_released(pipeline, started["run_id"])
        assert record["status"] == "SUCCEEDED"
        assert record["job_id"] == nova_runner.job_name({"run_id": started["run_id"]})
        kinds = {r["kind"] for r in record["resources"]}
        assert {CAPACITY_KIND, TASKS_KIND, STACK_KIND} <= kinds
        assert [u["RestrictedInstanceGroups"][0]["InstanceCount"] for u in world.cluster.updates] == [1, 0]
        assert world.runner_commands[:2] == ["setup", "submit"]
        assert "cancel" not in world.runner_commands  # a finished job is not cancelled
        (note,) = pipeline.notifications()
        assert "every resource the run created was removed" in note["message"]


def test_training_failure_is_reported_and_torn_down() -> None:
    world = HyperPodWorld(job_states=["Running", "Failed"])
    with _pipeline(world) as pipeline:
        started = pipeline.upload_and_trigger("training-data/hp-fail.jsonl", DATA)
        execution = pipeline.wait(started["execution_arn"])
        assert execution["error"] == "JobFailed"
        record = world.assert_released(pipeline, started["run_id"])
        assert record["status"] == "FAILED"
        assert record["error"]["step"] == "Train"


def test_capacity_that_never_arrives_fails_in_plain_words() -> None:
    world = HyperPodWorld(capacity=False, arrival_polls=1)
    with _pipeline(world) as pipeline:
        started = pipeline.upload_and_trigger("training-data/hp-nocap.jsonl", DATA)
        execution = pipeline.wait(started["execution_arn"])
        assert execution["error"] == "BackendFailed"
        assert "did not arrive within 30 minutes (0/1 nodes Running)" in execution["cause"]
        states = pipeline.entered_states(started["execution_arn"])
        assert "Submit" not in states
        assert 1 <= states.count("WaitForProvision") <= 10  # bounded by the capacity timeout, not retried forever
        record = world.assert_released(pipeline, started["run_id"])
        assert record["error"]["step"] == "Provision"
        assert "submit" not in world.runner_commands


def test_run_timeout_cancels_the_job_and_scales_down() -> None:
    world = HyperPodWorld(job_states=["Running"])
    with _pipeline(world) as pipeline:
        started = pipeline.upload_and_trigger("training-data/hp-slow.jsonl", DATA)
        _wait_for(pipeline, lambda: _job_state(pipeline, started["run_id"]) == "RUNNING")
        pipeline.shift_clock(3600)  # past the 5 min run timeout
        execution = pipeline.wait(started["execution_arn"])
        assert execution["error"] == "RunTimedOut"
        record = world.assert_released(pipeline, started["run_id"])
        assert record["status"] == "TIMED_OUT"
        assert "cancel" in world.runner_commands
        assert any(call[1] == "cancel-job" for call in world.cli_calls)


def test_cancelled_execution_is_reaped_with_everything_released() -> None:
    world = HyperPodWorld(job_states=["Running"])
    with _pipeline(world, status_poll_seconds=1) as pipeline:
        started = pipeline.upload_and_trigger("training-data/hp-stop.jsonl", DATA)
        _wait_for(pipeline, lambda: _job_state(pipeline, started["run_id"]) == "RUNNING")
        pipeline.sfn.stop_execution(executionArn=started["execution_arn"], cause="operator")
        assert pipeline.wait(started["execution_arn"])["status"] == "ABORTED"  # and no poll still in flight
        event = {
            "source": "aws.states",
            "detail-type": "Step Functions Execution Status Change",
            "detail": {"name": started["run_id"], "status": "ABORTED", "executionArn": started["execution_arn"]},
        }
        assert pipeline.invoke("reaper", event)["reaped"] is True
        record = world.assert_released(pipeline, started["run_id"])
        assert record["status"] == "ABORTED"
        assert "cancel" in world.runner_commands


def test_teardown_that_fails_once_is_retried_until_the_gpus_are_released() -> None:
    world = HyperPodWorld(scale_down_conflicts=1)
    with _pipeline(world) as pipeline:
        started = pipeline.upload_and_trigger("training-data/hp-sticky.jsonl", DATA)
        assert pipeline.wait(started["execution_arn"])["status"] == "SUCCEEDED"
        scale_downs = [u for u in world.cluster.updates if u["RestrictedInstanceGroups"][0]["InstanceCount"] == 0]
        assert len(scale_downs) == 2  # refused once, then done by the retried teardown
        record = world.assert_released(pipeline, started["run_id"])
        assert record["phases"]["teardown"]["outcome"] == "ok"


def test_provisioning_wait_is_bounded_by_the_pipeline_too() -> None:
    """Even when the backend's own capacity bound is longer, provision_max_wait_minutes ends the wait."""
    world = HyperPodWorld(capacity=False, arrival_polls=1)
    deploy = world.deploy
    world.deploy = lambda: {**deploy(), "hyperpod_capacity_timeout_minutes": "10000"}  # type: ignore[method-assign]
    with _pipeline(world, provision_poll_seconds=1) as pipeline:
        started = pipeline.upload_and_trigger("training-data/hp-wait.jsonl", DATA)
        _wait_for(pipeline, lambda: "WaitForProvision" in pipeline.entered_states(started["execution_arn"]))
        pipeline.shift_clock(3600)  # past provision_max_wait_minutes (5)
        execution = pipeline.wait(started["execution_arn"])
        assert execution["error"] == "BackendFailed"
        assert "provisioning did not finish within 5 minutes (provision_max_wait_minutes)" in execution["cause"]
        assert "GPU nodes 0/1 Running" in execution["cause"]  # what it was waiting for, in plain words
        record = world.assert_released(pipeline, started["run_id"])
        assert record["phases"]["provision"]["outcome"] == "timed out"
