"""BackendRoles in a bare stack: trust policies, the SDK's policy name, no runtime IAM write, narrow scopes, nag."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

from stacks.backends.roles import BackendRoles
from stacks.nag import enable_checks

ACCOUNT, REGION = "123456789012", "us-east-1"
IAM_WRITE = ("iam:Create", "iam:Attach", "iam:Put", "iam:Delete", "iam:Detach", "iam:Update", "iam:Tag")


def _add(app: cdk.App, name: str, **props: Any) -> tuple[BackendRoles, cdk.Stack]:
    stack = cdk.Stack(app, name, env=cdk.Environment(account=ACCOUNT, region=REGION))
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    bucket = s3.Bucket(stack, "Data", encryption_key=key, enforce_ssl=True, server_access_logs_prefix="logs/")
    roles = BackendRoles(
        stack,
        "BackendRoles",
        prefix="mtrl",
        data_bucket=bucket,
        data_key=key,
        reward_cluster_arn=f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/mtrl-rewards",
        hyperpod_cluster_arn=f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/abc123",
        eks_cluster_arn=f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/mtrl-eks",
        mlflow_arn=f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:mlflow-app/app-1",
        **props,
    )
    return roles, stack


@pytest.fixture(scope="module")
def apps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[BackendRoles, Template]]:
    """Default and opted-in variants in two bare stacks of one app: one synth (jsii and cdk-nag are slow)."""
    # Without aws-cdk-lib's CloudFormation check (it only warns; about 10 CPU-s to start): tests/conftest.py make_app.
    app = cdk.App(outdir=str(tmp_path_factory.mktemp("roles")), builtin_cloud_formation_validation=False)
    enable_checks(app)  # synth fails on any unacknowledged cdk-nag finding
    built = {"default": _add(app, "Roles"), "sam": _add(app, "RolesWithSam", allow_sam_role_creation=True)}
    app.synth()
    return {name: (roles, Template.from_stack(stack)) for name, (roles, stack) in built.items()}


@pytest.fixture(scope="module")
def built(apps: dict[str, tuple[BackendRoles, Template]]) -> tuple[BackendRoles, Template]:
    return apps["default"]


def role(template: Template, name: str) -> dict[str, Any]:
    (found,) = [r for r in template.find_resources("AWS::IAM::Role").values() if r["Properties"]["RoleName"] == name]
    return found["Properties"]


def statements_of(template: Template, role_logical_prefix: str) -> list[dict[str, Any]]:
    """Inline (default-policy) statements attached to roles whose logical id starts with the prefix."""
    out: list[dict[str, Any]] = []
    for policy in template.find_resources("AWS::IAM::Policy").values():
        refs = [r["Ref"] for r in policy["Properties"]["Roles"]]
        if any(ref.startswith(role_logical_prefix) for ref in refs):
            out.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return out


def actions(statement: dict[str, Any]) -> list[str]:
    value = statement["Action"]
    return [value] if isinstance(value, str) else list(value)


def test_serverless_job_role_trusts_the_job_principal_with_tag_session(built: tuple[BackendRoles, Template]) -> None:
    _, template = built
    trust = role(template, "mtrl-serverless-job")["AssumeRolePolicyDocument"]["Statement"]
    assert trust == [
        {
            "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Effect": "Allow",
            "Principal": {"Service": "job.sagemaker.amazonaws.com"},
        }
    ]


def test_agent_role_trusts_agentcore_and_lambda_with_job_runtime_access(built: tuple[BackendRoles, Template]) -> None:
    _, template = built
    agent = role(template, "mtrl-agent")
    principals = {s["Principal"]["Service"] for s in agent["AssumeRolePolicyDocument"]["Statement"]}
    assert principals == {"bedrock-agentcore.amazonaws.com", "lambda.amazonaws.com"}
    assert any("AmazonSageMakerJobRuntimeAccess" in str(arn) for arn in agent["ManagedPolicyArns"])


def test_sdk_policy_has_the_exact_name_and_is_attached_to_runner_and_rft_role(
    built: tuple[BackendRoles, Template],
) -> None:
    roles, template = built
    (policy,) = template.find_resources("AWS::IAM::ManagedPolicy").values()
    assert policy["Properties"]["ManagedPolicyName"] == "mtrl-rftPolicy"
    assert roles.rft_role_name == "mtrl-rft"
    attached = {ref["Ref"] for ref in policy["Properties"]["Roles"]}
    stack = cdk.Stack.of(roles)
    assert roles.rft_role is not None
    assert roles.runner_role is not None
    assert attached == {
        stack.get_logical_id(roles.rft_role.node.default_child),  # type: ignore[arg-type]
        stack.get_logical_id(roles.runner_role.node.default_child),  # type: ignore[arg-type]
    }
    for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
        assert not any(a.startswith(IAM_WRITE) for a in actions(statement)), statement
        if statement["Sid"] == "PerRunStacks":
            resources = [str(r) for r in statement["Resource"]]
            assert all(
                "stack/mtrl-nf*/*" in r or "aws-sam-cli-managed-default" in r or "transform/Serverless" in r
                for r in resources
            ), resources


def test_runner_role_has_no_iam_write_and_conditioned_pass_role(built: tuple[BackendRoles, Template]) -> None:
    _, template = built
    runner = statements_of(template, "BackendRolesNovaRunnerRole")
    assert runner
    for statement in runner:
        assert not any(a.startswith(IAM_WRITE) for a in actions(statement)), statement
        assert "*" not in actions(statement)
    (pass_role,) = [s for s in runner if "iam:PassRole" in actions(s)]
    assert set(pass_role["Condition"]["StringEquals"]["iam:PassedToService"]) == {
        "ecs-tasks.amazonaws.com",
        "lambda.amazonaws.com",
    }
    (run_task,) = [s for s in runner if s.get("Sid") == "SamDeployTask"]
    assert "task-definition/mtrl-nf*" in str(run_task["Resource"])
    assert run_task["Condition"] == {
        "ArnEquals": {"ecs:cluster": f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/mtrl-rewards"}
    }


def test_no_role_writes_iam_unless_sam_role_creation_is_opted_in(
    apps: dict[str, tuple[BackendRoles, Template]], built: tuple[BackendRoles, Template]
) -> None:
    _, template = built
    for policy in template.find_resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            assert not any(a.startswith(IAM_WRITE) for a in actions(statement)), statement
    _, opted = apps["sam"]
    rft = statements_of(opted, "BackendRolesRftRole")
    (create,) = [s for s in rft if s.get("Sid") == "SamTemplateRoles"]
    assert f":iam::{ACCOUNT}:role/mtrl-nf*" in str(create["Resource"])
    (passing,) = [s for s in rft if s.get("Sid") == "PassSamTemplateRolesToFunctions"]
    assert passing["Condition"] == {"StringEquals": {"iam:PassedToService": "lambda.amazonaws.com"}}


def test_every_pass_role_has_passed_to_service(built: tuple[BackendRoles, Template]) -> None:
    _, template = built
    for policy in [
        *template.find_resources("AWS::IAM::Policy").values(),
        *template.find_resources("AWS::IAM::ManagedPolicy").values(),
    ]:
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if "iam:PassRole" in actions(statement):
                assert "iam:PassedToService" in statement["Condition"]["StringEquals"]


@pytest.mark.parametrize("role_prefix", ["BackendRolesNovaRunnerRole", "BackendRolesRftRole"])
def test_runner_and_rft_roles_list_only_their_prefixes_and_delete_nothing(
    built: tuple[BackendRoles, Template], role_prefix: str
) -> None:
    """Issue 36: CDK's grant_read_write gave both roles s3:List* on the whole data bucket and s3:DeleteObject* on all of
    runs/*. The runner reads its spec and the run's rows and writes each command's result (nova_runner.py); the SDK's
    per-run infrastructure reads and writes run objects; neither deletes one (a run's folder is its record)."""
    _, template = built
    statements = statements_of(template, role_prefix)
    granted = [action for statement in statements for action in actions(statement)]
    assert not [action for action in granted if action.startswith(("s3:List", "s3:Delete")) and "*" in action]
    assert not [action for action in granted if action.startswith("s3:Delete")]
    (listing,) = [s for s in statements if "s3:ListBucket" in actions(s)]
    assert actions(listing) == ["s3:ListBucket"]
    # IfExists: the SDK's HeadBucket is s3:ListBucket with no prefix (tests/contract/test_nova_runner_contract.py).
    prefixes = listing["Condition"]["StringLikeIfExists"]["s3:prefix"]
    assert set(prefixes) <= {"runs/*", "training-data/*"}
    assert "runs/*" in prefixes
    object_resources = json.dumps(
        [s["Resource"] for s in statements if s.get("Sid") in {"ReadRunObjects", "WriteRunObjects"}]
    )
    assert "/runs/*" in object_resources
