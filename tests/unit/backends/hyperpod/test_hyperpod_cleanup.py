"""The hyperpod adapter's cleanup (mtrl/backends/hyperpod/cleanup.py): complete and idempotent, GPUs released after a
failed provision or through a cluster update, and each run's workers on a role scoped to that run."""

from __future__ import annotations

import fnmatch
import json
from typing import Any

import pytest
from aws_fakes import REGION

from mtrl.backends.hyperpod import (
    CAPACITY_KIND,
    STACK_KIND,
    WORKER_ROLE_KIND,
    ProvisioningInProgress,
    cloudformation_stack_name,
    gpu_holds,
    parse_settings,
    sdk_stack_name,
    worker_role_name,
)
from mtrl.backends.pricing import cost_for_run
from mtrl.contracts.backend import BackendError
from tests.unit.backends.hyperpod.hyperpod_world import Shared, World


def test_cleanup_is_complete_and_idempotent(world: World) -> None:
    world.provision_until_ready()
    sdk_family = sdk_stack_name(parse_settings(world.settings()), world.run_id)
    # What the SDK registers for its SAM deploy task (moto matches familyPrefix exactly, so the family is the prefix).
    world.ecs.register_task_definition(
        family=sdk_family, containerDefinitions=[{"name": "sam", "image": "x", "memory": 512}]
    )
    # What the SDK's setup() creates outside its stack (nova_forge_sdk_observed.md: logs:CreateLogGroup
    # /ecs/<base>-NovaForgeSDK, no retention, never deleted by the SDK); issue 20 item 6: teardown removes it.
    logs = world.aws.session.client("logs")
    sdk_group = f"/ecs/{cloudformation_stack_name(parse_settings(world.settings()), world.run_id)}"
    logs.create_log_group(logGroupName=sdk_group)
    logs.create_log_group(logGroupName="/ecs/someone-elses-task")
    world.clock.now += 3600
    run = world.run()
    removed = world.adapter.cleanup(run)
    assert {r.kind for r in removed} == {r.kind for r in run.resources}
    assert len(removed) == len(run.resources)
    assert world.cluster.target == 0  # GPU group back at its idle count
    assert world.cluster.updates[-1]["InstanceGroups"][0]["InstanceCount"] == 0
    assert world.tasks("reward-workers") == []
    assert world.tasks("nova-runner-setup") == []
    stack = next(r.identifier for r in run.resources if r.kind == STACK_KIND)
    statuses = [
        s["StackStatus"]
        for s in world.aws.session.client("cloudformation").list_stacks()["StackSummaries"]
        if s["StackName"] == stack
    ]
    assert statuses == ["DELETE_COMPLETE"]
    assert world.ecs.list_task_definitions(familyPrefix=sdk_family, status="ACTIVE")["taskDefinitionArns"] == []
    groups = [g["logGroupName"] for g in logs.describe_log_groups(logGroupNamePrefix="/ecs/")["logGroups"]]
    assert groups == ["/ecs/someone-elses-task"]  # the run's SDK log group is gone, nothing else
    # Cost of the run from what cleanup returned: 2 GPUs held for the hour.
    holds = gpu_holds(removed)
    assert len(holds) == 1
    record = {"backend": "hyperpod", "region": REGION, "gpu_holds": holds}
    assert cost_for_run(record).lines[0].quantity == 2
    # The same from the run registry's entries (details + removed_at, as mark_removed stores them).
    capacity = next(r for r in run.resources if r.kind == CAPACITY_KIND)
    entry = {"kind": capacity.kind, "identifier": capacity.identifier, "details": dict(capacity.details)}
    entry["removed_at"] = holds[0]["end"].replace("+00:00", "Z")
    assert gpu_holds([entry]) == holds
    updates = len(world.cluster.updates)
    world.cluster.arrive()
    second = world.adapter.cleanup(world.run())
    assert [(r.kind, r.identifier) for r in second] == [(r.kind, r.identifier) for r in removed]
    assert len(world.cluster.updates) == updates  # already at idle: no second UpdateCluster


def _policy_allows(document: dict[str, Any], action: str, resource: str) -> bool:
    return any(
        statement["Effect"] == "Allow"
        and action in ([statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"])
        and fnmatch.fnmatchcase(resource, statement["Resource"])
        for statement in document["Statement"]
    )


def test_each_runs_workers_get_a_role_that_reaches_only_that_runs_queues_and_proxy(shared: Shared) -> None:
    # Issue 20 item 6: the shared worker role could invoke every run's reward proxy (<stem>-nf*). ECS task roles carry
    # no per-task session tags (aws/containers-roadmap#2426), so there is no tag to condition on: each run's workers
    # run under their own role, created under the deploy-time boundary, granted only their run's names.
    first, second = World(shared), World(shared)
    roles = {}
    for world in (first, second):
        world.provision_until_ready()
        iam = world.aws.session.client("iam")
        (resource,) = [r for r in world.recorder.resources if r.kind == WORKER_ROLE_KIND]
        assert resource.identifier == worker_role_name("mtrl", world.run_id)
        role = iam.get_role(RoleName=resource.identifier)["Role"]
        assert role["PermissionsBoundary"]["PermissionsBoundaryArn"] == shared.worker_boundary
        trust = role["AssumeRolePolicyDocument"]
        trust = json.loads(trust) if isinstance(trust, str) else trust
        (statement,) = trust["Statement"]
        assert statement["Principal"] == {"Service": "ecs-tasks.amazonaws.com"}
        assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": "123456789012"}
        attached = iam.list_attached_role_policies(RoleName=resource.identifier)["AttachedPolicies"]
        assert [a["PolicyArn"] for a in attached] == [shared.worker_base_policy]
        (name,) = iam.list_role_policies(RoleName=resource.identifier)["PolicyNames"]
        document = iam.get_role_policy(RoleName=resource.identifier, PolicyName=name)["PolicyDocument"]
        roles[world.run_id] = (role["Arn"], json.loads(document) if isinstance(document, str) else document)
        # The workers were started with it.
        described = world.ecs.describe_tasks(cluster=world.ecs_cluster, tasks=world.tasks("reward-workers"))["tasks"]
        assert {task["overrides"]["taskRoleArn"] for task in described} == {role["Arn"]}
    assert len({arn for arn, _ in roles.values()}) == 2
    for world, other in ((first, second), (second, first)):
        _, document = roles[world.run_id]
        mine, theirs = (cloudformation_stack_name(parse_settings(w.settings()), w.run_id) for w in (world, other))
        proxy = "arn:aws:lambda:us-east-1:123456789012:function:{}-SageMaker-proxy"
        assert _policy_allows(document, "lambda:InvokeFunctionUrl", proxy.format(mine))
        assert not _policy_allows(document, "lambda:InvokeFunctionUrl", proxy.format(theirs))
        queue = "arn:aws:sqs:us-east-1:123456789012:{}-RolloutQueue"
        assert _policy_allows(document, "sqs:ReceiveMessage", queue.format(mine))
        assert not _policy_allows(document, "sqs:ReceiveMessage", queue.format(theirs))
    # Teardown removes the role (and a second teardown finds nothing to remove).
    first.adapter.cleanup(first.run())
    with pytest.raises(first.aws.session.client("iam").exceptions.NoSuchEntityException):
        first.aws.session.client("iam").get_role(RoleName=worker_role_name("mtrl", first.run_id))
    first.adapter.cleanup(first.run())


def test_cleanup_after_failed_provision_still_releases_gpus(world: World) -> None:
    with pytest.raises(ProvisioningInProgress):
        world.adapter.provision(world.run())  # scale-up requested, setup runner started, nothing else
    world.cluster.arrive(capacity=False)
    removed = world.adapter.cleanup(world.run())
    assert world.cluster.target == 0
    assert world.tasks("nova-runner-setup") == []
    assert {r.kind for r in removed} == {r.kind for r in world.recorder.resources}  # stack never existed: fine


def test_cleanup_while_cluster_is_updating_retries_the_gpu_but_removes_the_rest(world: World) -> None:
    world.provision_until_ready()
    world.cluster.status = "SystemUpdating"
    with pytest.raises(BackendError, match="GPU group not yet released") as caught:
        world.adapter.cleanup(world.run())
    assert caught.value.transient
    assert world.tasks("reward-workers") == []  # the other resources went anyway
    world.cluster.arrive()
    world.adapter.cleanup(world.run())
    assert world.cluster.target == 0


def test_cleanup_with_nothing_recorded_is_a_no_op(world: World) -> None:
    assert world.adapter.cleanup(world.run()) == []
    assert world.cluster.updates == []
