"""Reward-worker stack: idle Fargate service, private networking, KMS logs, and the weakest task role."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from mtrl.settings import SettingsError, load_settings
from stacks.app_builder import Deployment
from stacks.constructs.reward_workers import DOCKERFILE
from tests.unit.stacks.template_tools import as_list, cfn_lint, least_privilege_violations, of_type, only


def _lid(deployment: Deployment, construct: Any) -> str:
    stack = deployment.reward_workers
    return stack.get_logical_id(construct.node.default_child or construct)


def test_cluster_has_container_insights(workers_template: Template) -> None:
    workers_template.has_resource_properties(
        "AWS::ECS::Cluster",
        {"ClusterSettings": [{"Name": "containerInsights", "Value": "enabled"}], "ClusterName": "mtrl-reward-workers"},
    )


def test_service_idles_at_zero_in_private_subnets_without_public_ip(
    deployment: Deployment, workers_json: dict[str, Any]
) -> None:
    _, service = only(workers_json, "AWS::ECS::Service")
    props = service["Properties"]
    assert props["DesiredCount"] == 0
    assert props["LaunchType"] == "FARGATE"
    vpc = props["NetworkConfiguration"]["AwsvpcConfiguration"]
    assert vpc["AssignPublicIp"] == "DISABLED"
    network = deployment.network
    assert network.get_logical_id(network.network.reward_worker_security_group.node.default_child) in json.dumps(
        vpc["SecurityGroups"]
    )
    subnets = json.dumps(vpc["Subnets"])
    assert len(vpc["Subnets"]) == len(network.network.vpc.private_subnets)
    assert all(network.get_logical_id(s.node.default_child) in subnets for s in network.network.vpc.private_subnets)
    assert props["EnableExecuteCommand"] is False


def test_scaling_limits_come_from_settings(deployment: Deployment, workers_template: Template) -> None:
    workers_template.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalableTarget",
        {
            "MinCapacity": 0,
            "MaxCapacity": deployment.settings.reward_worker_max_tasks,
            "ScalableDimension": "ecs:service:DesiredCount",
        },
    )
    assert deployment.reward_workers.workers.max_tasks == deployment.settings.reward_worker_max_tasks


def test_task_size_and_image_from_the_repo_dockerfile(
    deployment: Deployment, synthesized: tuple[Deployment, Any], workers_json: dict[str, Any]
) -> None:
    settings = deployment.settings
    _, task = only(workers_json, "AWS::ECS::TaskDefinition")
    props = task["Properties"]
    assert props["Cpu"] == str(settings.reward_worker_cpu)
    assert props["Memory"] == str(settings.reward_worker_memory_mib)
    assert props["RequiresCompatibilities"] == ["FARGATE"]
    assert props["RuntimePlatform"] == {"CpuArchitecture": "X86_64", "OperatingSystemFamily": "LINUX"}
    (container,) = props["ContainerDefinitions"]
    assert "container-assets" in json.dumps(container["Image"])  # a CDK image asset, built at deploy
    env = {e["Name"]: e["Value"] for e in container["Environment"]}
    assert env["MTRL_CONCURRENCY"] == str(settings.reward_worker_max_workers)  # what mtrl.worker reads
    assert env["MTRL_ENVIRONMENT_PREFIX"] == settings.reward_worker_environment_prefix
    assert container["LogConfiguration"]["LogDriver"] == "awslogs"

    # Synth staged the Docker context (no Docker needed): the Dockerfile and the project, nothing else.
    manifest = json.loads((Path(synthesized[1].directory) / "mtrl-reward-workers.assets.json").read_text())
    (image,) = manifest["dockerImages"].values()
    assert image["source"]["dockerFile"] == DOCKERFILE
    staged = Path(synthesized[1].directory) / image["source"]["directory"]
    assert (staged / DOCKERFILE).is_file()
    assert (staged / "mtrl" / "__init__.py").is_file()
    assert (staged / "pyproject.toml").is_file()
    assert (staged / "custom-environments").is_dir()
    for absent in (".venv", "node_modules", "tests", ".git", "cdk.out", "stacks"):
        assert not (staged / absent).exists(), absent


def test_log_group_is_encrypted_with_retention(deployment: Deployment, workers_template: Template) -> None:
    workers_template.has_resource_properties(
        "AWS::Logs::LogGroup",
        {
            "LogGroupName": "/mtrl/reward-workers",
            "KmsKeyId": Match.any_value(),
            "RetentionInDays": deployment.settings.log_retention_days,
        },
    )


def test_task_role_is_the_weakest_role(deployment: Deployment, workers_json: dict[str, Any]) -> None:
    workers = deployment.reward_workers.workers
    role = workers_json["Resources"][_lid(deployment, workers.task_role)]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "ecs-tasks.amazonaws.com"}
    assert trust["Condition"]["StringEquals"] == {"aws:SourceAccount": "123456789012"}
    # The shared role has only the base policy: no run's queues, no run's proxy (issue 20 item 6; each run's workers
    # get their own role inside the boundary below, mtrl/backends/hyperpod/worker_role.py).
    assert role["ManagedPolicyArns"] == [{"Ref": _lid(deployment, workers.base_policy)}]
    assert "Policies" not in role
    assert not [
        p for p in of_type(workers_json, "AWS::IAM::Policy").values()
        if {"Ref": _lid(deployment, workers.task_role)} in p["Properties"]["Roles"]
    ]  # fmt: skip
    managed = of_type(workers_json, "AWS::IAM::ManagedPolicy")
    base = managed[_lid(deployment, workers.base_policy)]["Properties"]
    assert base["ManagedPolicyName"] == "mtrl-reward-worker-base"
    statements = {s["Sid"]: s for s in base["PolicyDocument"]["Statement"]}
    assert set(statements) == {"ReadEnvironmentPackages", "ListEnvironmentPackages", "DecryptThroughS3AndSqsOnly"}
    reads = json.dumps(statements["ReadEnvironmentPackages"]["Resource"])
    assert reads.endswith('/environments/*"]]}'), reads  # one prefix of the data bucket, never "bucket/*"
    assert statements["ListEnvironmentPackages"]["Condition"] == {"StringLike": {"s3:prefix": ["environments/*"]}}
    assert statements["DecryptThroughS3AndSqsOnly"]["Condition"] == {
        "StringEquals": {"kms:ViaService": ["s3.us-east-1.amazonaws.com", "sqs.us-east-1.amazonaws.com"]}
    }

    # The boundary of every run's worker role: the base, plus any run's queues and proxies (each run's own role gets
    # only its own inside it). Metrics are EMF log lines written through the execution role's log driver.
    boundary = managed[_lid(deployment, workers.run_boundary)]["Properties"]
    assert boundary["ManagedPolicyName"] == "mtrl-reward-worker-run-boundary"
    assert "Roles" not in boundary  # a boundary, attached to nothing
    statements = {s["Sid"]: s for s in boundary["PolicyDocument"]["Statement"]}
    assert set(statements) == {
        "ReadEnvironmentPackages",
        "ListEnvironmentPackages",
        "UseRunQueues",
        "CallRunProxyUrl",
        "CallRunProxyThroughItsUrl",
        "DecryptThroughS3AndSqsOnly",
    }
    actions = {a for s in statements.values() for a in as_list(s["Action"])}
    assert not any(a.startswith(("iam:", "cloudformation:", "ecs:", "dynamodb:", "states:")) for a in actions)
    # Lambda only to call a run's Nova Forge proxy through its IAM-auth function URL (defect 6 of issue 10).
    proxy = "arn:aws:lambda:us-east-1:123456789012:function:mtrl-nf*-NovaForgeSDK-SageMaker-proxy"
    assert statements["CallRunProxyUrl"]["Resource"] == proxy
    assert statements["CallRunProxyUrl"]["Condition"] == {"StringEquals": {"lambda:FunctionUrlAuthType": "AWS_IAM"}}
    assert statements["CallRunProxyThroughItsUrl"]["Resource"] == proxy
    assert statements["CallRunProxyThroughItsUrl"]["Condition"] == {"Bool": {"lambda:InvokedViaFunctionUrl": "true"}}
    assert {a for a in actions if a.startswith("lambda:")} == {"lambda:InvokeFunctionUrl", "lambda:InvokeFunction"}
    assert {a for a in actions if a.startswith("s3:")} == {"s3:GetObject", "s3:ListBucket"}
    assert statements["UseRunQueues"]["Resource"] == "arn:aws:sqs:us-east-1:123456789012:mtrl-nf*"


def test_every_policy_is_least_privilege(workers_json: dict[str, Any]) -> None:
    assert least_privilege_violations(workers_json) == []


def test_outputs(workers_json: dict[str, Any]) -> None:
    assert set(workers_json["Outputs"]) >= {
        "ClusterName",
        "ServiceName",
        "TaskDefinitionArn",
        "TaskRoleArn",
        "MaxTasks",
        "QueueNamePrefix",
    }


def test_cfn_lint_finds_nothing(workers_json: dict[str, Any]) -> None:
    matches = cfn_lint(workers_json)
    assert [f"{m.rule.id} {m.message}" for m in matches] == []


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"reward_worker_memory_mib": 1024}, "not valid with 1024 CPU units"),
        ({"reward_worker_cpu": 300}, "reward_worker_cpu"),
        ({"reward_worker_max_tasks": 0}, "reward_worker_max_tasks"),
        ({"reward_worker_environment_prefix": "/abs"}, "reward_worker_environment_prefix"),
    ],
)
def test_invalid_worker_settings_name_the_key(context: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings({"region": "us-east-1", **context})


def test_valid_fargate_sizes_are_accepted() -> None:
    settings = load_settings({"region": "us-east-1", "reward_worker_cpu": 4096, "reward_worker_memory_mib": 30720})
    assert settings.reward_worker_memory_mib == 30720
