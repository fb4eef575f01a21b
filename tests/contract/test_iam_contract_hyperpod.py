"""The hyperpod adapter's AWS calls, recorded at botocore through a whole run (preflight → provision → submit →
status → cancel → cleanup), must each be allowed for the pipeline's backend function role as synthesized.

The fake environment is built from the synthesized app itself: the adapter's settings are the backend function's
hyperpod section of ``MTRL_BACKEND_SETTINGS`` as deployed (ECS cluster ARN, task families, HyperPod cluster name), moto
runs in the model's account, and the fake HyperPod cluster's node role is the cluster stack's execution role.
Only the subnets and security group are moto's own (RunTask needs existing ones; ECS checks no IAM on them).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from mtrl.backends._aws import AwsClients
from mtrl.backends.hyperpod import HyperPodAdapter, ProvisioningInProgress, cloudformation_stack_name, parse_settings
from tests.contract.iam_contract import AppModel, AwsCall, assert_calls_allowed, markdown_table
from tests.contract.recorded_runs import (
    BACKEND_ROLE,
    BackendRun,
    Clock,
    ModelCluster,
    deployed_backend_settings,
    deployed_data_bucket,
    model_account_aws,
)
from tests.unit.backends.aws_fakes import FakeAws, create_task_network, moto_ecs_tasks, new_session

STACK_TEMPLATE = {"Resources": {"Queue": {"Type": "AWS::SQS::Queue"}}}
STACK_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "sqs:GetQueueUrl", "Resource": "*"}],
}


@pytest.fixture
def recorded_run(nova_app_model: AppModel, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[AwsCall]]:
    deployed = deployed_backend_settings(nova_app_model, "hyperpod")
    with moto_ecs_tasks(), model_account_aws(monkeypatch, nova_app_model):
        aws = FakeAws(new_session())
        bucket = deployed_data_bucket(nova_app_model)
        aws.session.client("s3").create_bucket(Bucket=bucket)
        cluster_name = deployed["ecs_cluster_arn"].rsplit("/", 1)[-1]
        subnet, sg, ecs_cluster = create_task_network(
            aws.session, cluster_name=cluster_name, worker_container=deployed["reward_container_name"]
        )
        assert ecs_cluster == deployed["ecs_cluster_arn"]  # moto in the model's account: the same ARN
        # The reward-worker stack's managed policies (each run's worker role is created under the boundary).
        iam = aws.session.client("iam")
        for arn in (deployed["reward_worker_run_boundary_arn"], deployed["reward_worker_base_policy_arn"]):
            created = iam.create_policy(PolicyName=arn.rsplit("/", 1)[-1], PolicyDocument=json.dumps(STACK_POLICY))
            assert created["Policy"]["Arn"] == arn
        cluster = ModelCluster(
            aws,
            name=deployed["hyperpod_cluster_name"],
            arn=str(nova_app_model.sagemaker_cluster_arn(deployed["hyperpod_cluster_name"])),
            node_role=nova_app_model.arn_of("mtrl-cluster/HyperPod/ExecutionRole"),
            group=deployed["hyperpod_gpu_instance_group"],
        )
        clock = Clock()

        def sleep(seconds: float) -> None:
            clock.now += seconds

        adapter = HyperPodAdapter(AwsClients(aws.session), clock=clock, sleep=sleep, wait_seconds=0)
        run_id = "wordle-20261201-contract"
        settings = {
            **deployed,
            "run_id": run_id,
            "instance_count": 1,
            "worker_count": 2,
            "environment": "wordle",
            # The recipe overrides the status poll estimates the step from (signal rows: GetMetricData).
            "hyperparameters": {"max_steps": 10, "global_batch_size": 4},
            "task_subnet_ids": [subnet],
            "task_security_group_ids": [sg],
        }
        ecs, s3 = aws.session.client("ecs"), aws.session.client("s3")
        backend = BackendRun(run_id=run_id, settings=settings, bucket=bucket)  # one phase, as the function runs it

        def runner_finishes(command: str, result: dict[str, Any]) -> None:
            """The runner container's side (not the backend role's calls): its result, and for setup the stack."""
            if command == "setup":
                aws.session.client("cloudformation").create_stack(
                    StackName=cloudformation_stack_name(parse_settings(settings), run_id),
                    TemplateBody=json.dumps(STACK_TEMPLATE),
                )
            document = {"command": command, "ok": True, "finished_at_epoch": clock.now, "result": result}
            s3.put_object(
                Bucket=bucket, Key=f"runs/{run_id}/backend/{command}.json", Body=json.dumps(document).encode()
            )
            for resource in backend.recorder.resources:
                if resource.details.get("role") == f"nova-runner-{command}":
                    started_by = resource.identifier.split("|")[1]
                    for arn in ecs.list_tasks(cluster=ecs_cluster, startedBy=started_by)["taskArns"]:
                        ecs.stop_task(cluster=ecs_cluster, task=arn, reason="done")

        findings = backend(adapter.preflight)
        assert {f.check for f in findings if not f.ok} <= {"budget"}, findings
        with pytest.raises(ProvisioningInProgress):
            backend(adapter.provision)
        cluster.arrive()
        base = parse_settings(settings)
        stack = cloudformation_stack_name(base, run_id)
        runner_finishes(
            "setup",
            {
                "rollout_request_queue_url": f"https://sqs.us-east-1.amazonaws.com/{nova_app_model.account}/{stack}-Requests",
                "rollout_response_sqs_url": f"https://sqs.us-east-1.amazonaws.com/{nova_app_model.account}/{stack}-Results",
                "proxy_function_url": "https://abc123.lambda-url.us-east-1.on.aws/",
            },
        )
        backend(adapter.provision)
        with pytest.raises(Exception, match="in progress"):
            backend(adapter.submit)
        runner_finishes("submit", {"job_name": "rft-wordle-abc"})
        job = backend(adapter.submit)
        backend(adapter.status, job)
        runner_finishes("status", {"job_name": job, "state": "Running"})
        backend(adapter.status, job)
        with pytest.raises(Exception, match="in progress"):
            backend(adapter.cancel, job)
        runner_finishes("cancel", {"job_name": job})
        backend(adapter.cancel, job)
        cluster.status = "InService"
        backend(adapter.cleanup)
        yield backend.calls


def test_every_adapter_call_is_allowed_for_the_backend_role(
    recorded_run: list[AwsCall], nova_app_model: AppModel
) -> None:
    operations = {str(c) for c in recorded_run}
    # The run really went through each phase's calls (a contract over a short recording proves little).
    assert operations >= {
        "sagemaker.DescribeCluster",
        "sagemaker.UpdateCluster",
        "sagemaker.ListClusterNodes",
        "ecs.DescribeTaskDefinition",
        "ecs.ListTasks",
        "ecs.RunTask",
        "ecs.DescribeTasks",
        "ecs.StopTask",
        "s3.PutObject",
        "s3.GetObject",
        "cloudwatch.GetMetricData",  # the status poll's signal rows (mtrl.backends.hyperpod.signals)
        "cloudformation.DescribeStacks",
        "cloudformation.DeleteStack",
        "ecs.ListTaskDefinitions",
        "logs.DeleteLogGroup",  # the SDK's /ecs/<base>-NovaForgeSDK (issue 20 item 6)
        # the run's own worker role (issue 20 item 6)
        "iam.CreateRole",
        "iam.PutRolePolicy",
        "iam.AttachRolePolicy",
        "iam.DeleteRolePolicy",
        "iam.DetachRolePolicy",
        "iam.DeleteRole",
    }, operations
    # The calls that change the run's worker role act on a role created with the worker boundary: that is the role's
    # iam:PermissionsBoundary (CreateRole's own request carries it).
    boundary = deployed_backend_settings(nova_app_model, "hyperpod")["reward_worker_run_boundary_arn"]
    assert boundary.endswith(":policy/mtrl-reward-worker-run-boundary")
    decisions = assert_calls_allowed(
        recorded_run, BACKEND_ROLE, model=nova_app_model, context={"iam:PermissionsBoundary": boundary}
    )
    print("\n" + markdown_table(decisions))  # the report's table (pytest -s)
