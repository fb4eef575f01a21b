"""The world the hyperpod adapter tests run in: the deployed names, the moto network the reward workers and the Nova
runner start in (made once per test module), and per test a fresh fake cluster, run id and adapter."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from aws_fakes import REGION, FakeAws, FakeCluster, Recorder, new_session

from mtrl.backends._aws import AwsClients
from mtrl.backends.hyperpod import HyperPodAdapter, ProvisioningInProgress, cloudformation_stack_name, parse_settings
from mtrl.contracts.backend import CreatedResource, RunContext

BUCKET = "mtrl-data-123456789012"
# What the stack passes (stacks/app_builder.py, nova_env_package_uris): one content-addressed package per environment.
PACKAGE_URIS = {
    "wordle": f"s3://{BUCKET}/nova-envs/wordle/{'a' * 64}.tar.gz",
    "ask_to_code": f"s3://{BUCKET}/nova-envs/ask_to_code/{'b' * 64}.tar.gz",
}
STACK_TEMPLATE = {
    "Resources": {"RolloutQueue": {"Type": "AWS::SQS::Queue"}},
    "Outputs": {
        "RolloutQueueUrl": {"Value": {"Ref": "RolloutQueue"}},
        "ProxyFunctionUrl": {"Value": "https://proxy.lambda-url.us-east-1.on.aws/"},
    },
}


@dataclass(frozen=True)
class Shared:
    """What every test can share: one moto account with the network, ECS cluster, task definitions and bucket.

    Creating a VPC in moto costs about a second, so the module shares one; each test gets its own run id, so its
    S3 keys, ECS ``startedBy`` tokens and stack names never meet another test's.
    """

    subnet: str
    sg: str
    ecs_cluster: str
    worker_boundary: str = ""
    worker_base_policy: str = ""


class Clock:
    def __init__(self) -> None:
        self.now = 1_795_000_000.0

    def __call__(self) -> float:
        return self.now


class World:
    def __init__(self, shared: Shared, *, restricted: bool = False) -> None:
        self.run_id = f"wordle-{uuid.uuid4().hex[:12]}"
        self.aws = FakeAws(new_session())
        self.cluster = FakeCluster(self.aws, restricted=restricted)
        self.clock = Clock()
        self.subnet, self.sg, self.ecs_cluster = shared.subnet, shared.sg, shared.ecs_cluster
        self.worker_boundary, self.worker_base_policy = shared.worker_boundary, shared.worker_base_policy
        self.ecs = self.aws.session.client("ecs")
        self.adapter = HyperPodAdapter(
            AwsClients(self.aws.session), clock=self.clock, sleep=self._sleep, wait_seconds=0
        )
        self.recorder = Recorder()

    def _sleep(self, seconds: float) -> None:
        self.clock.now += seconds

    def settings(self, **overrides: Any) -> dict[str, Any]:
        return {
            "region": REGION,
            "prefix": "mtrl",
            "run_id": self.run_id,
            "hyperpod_cluster_name": "mtrl-hp",
            "hyperpod_gpu_instance_group": "gpu",
            "instance_count": 2,
            "hyperpod_capacity_timeout_minutes": 30,
            "ecs_cluster_arn": self.ecs_cluster,
            "task_subnet_ids": [self.subnet],
            "task_security_group_ids": [self.sg],
            "reward_task_definition": "mtrl-reward-worker",
            "reward_worker_run_boundary_arn": self.worker_boundary,
            "reward_worker_base_policy_arn": self.worker_base_policy,
            "worker_count": 2,
            "environment": "wordle",
            "environment_args": {"max_turns": 6},
            "nova_runner_task_definition": "mtrl-nova-runner",
            "nova_rft_role_name": "mtrl-rft",
            "nova_env_package_uris": [f"{env_id}={uri}" for env_id, uri in PACKAGE_URIS.items()],
            "hyperparameters": {"max_steps": 10},
            **overrides,
        }

    def run(self, **overrides: Any) -> RunContext:
        return RunContext(
            run_id=self.run_id,
            settings=self.settings(**overrides),
            dataset_uri=f"s3://{BUCKET}/training-data/wordle.jsonl",
            eval_dataset_uri=None,
            output_uri=f"s3://{BUCKET}/runs/{self.run_id}/",
            resources=tuple(self.recorder.resources),
            record_resource=self.recorder,
        )

    def tasks(self, role: str, status: str = "RUNNING") -> list[str]:
        started_by = next(r.identifier.split("|")[1] for r in self.recorder.resources if r.details.get("role") == role)
        return self.ecs.list_tasks(cluster=self.ecs_cluster, startedBy=started_by, desiredStatus=status)["taskArns"]

    def runner_finishes(self, command: str, result: dict[str, Any], *, ok: bool = True) -> None:
        """What the runner container would do: write its result (and, for setup, the SDK's stack)."""
        if command == "setup" and ok:
            self.aws.session.client("cloudformation").create_stack(
                StackName=cloudformation_stack_name(parse_settings(self.settings()), self.run_id),
                TemplateBody=json.dumps(STACK_TEMPLATE),
            )
        document = {"command": command, "ok": ok, "finished_at_epoch": self.clock.now}
        document.update({"result": result} if ok else {"error": result.get("error", "failed")})
        self.aws.session.client("s3").put_object(
            Bucket=BUCKET, Key=f"runs/{self.run_id}/backend/{command}.json", Body=json.dumps(document).encode()
        )
        for arn in self.tasks(f"nova-runner-{command}"):
            self.ecs.stop_task(cluster=self.ecs_cluster, task=arn, reason="done")

    def provision_until_ready(self) -> list[CreatedResource]:
        with pytest.raises(ProvisioningInProgress):
            self.adapter.provision(self.run())
        self.cluster.arrive()
        self.runner_finishes("setup", SETUP_OUTPUTS)
        return self.adapter.provision(self.run())


SETUP_OUTPUTS = {
    "rollout_request_queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q",
    "rollout_response_sqs_url": "https://sqs.us-east-1.amazonaws.com/123456789012/r",
    "proxy_function_url": "https://proxy.lambda-url.us-east-1.on.aws/",
}
