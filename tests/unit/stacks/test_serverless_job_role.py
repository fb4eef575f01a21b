"""The serverless job role grants exactly the documented job policy's actions (``serverless_job_policy.json``, whose
``_source`` names the MTRL prerequisites page), each scoped to the deployment; the agent role has the job-runtime
access the agent's calls need."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template
from test_backend_roles import _add, actions, role, statements_of

from stacks.backends.roles import BackendRoles
from stacks.nag import enable_checks
from tests.unit.backends.aws_calls import AGENT_ACTIONS, SERVERLESS_ADAPTER_ACTIONS

DOCUMENTED = json.loads(
    (Path(__file__).resolve().parents[3] / "stacks" / "constructs" / "serverless_job_policy.json").read_text()
)


RUNTIME = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/wordle_agent-AbCdEf1234"


@pytest.fixture(scope="module")
def built_both(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[BackendRoles, Template]]:
    """With an AgentCore runtime listed (every documented statement) and without one, in one synth."""
    app = cdk.App(outdir=str(tmp_path_factory.mktemp("job-role")), builtin_cloud_formation_validation=False)
    enable_checks(app)  # synth fails on any unacknowledged cdk-nag finding
    variants = {"listed": _add(app, "Roles", agent_runtime_arns=[RUNTIME]), "none": _add(app, "RolesNoRuntime")}
    app.synth()
    return {name: (roles, Template.from_stack(stack)) for name, (roles, stack) in variants.items()}


@pytest.fixture(scope="module")
def built(built_both: dict[str, tuple[BackendRoles, Template]]) -> tuple[BackendRoles, Template]:
    return built_both["listed"]


def test_agentcore_is_granted_for_the_listed_runtimes_only(built_both: dict[str, Any]) -> None:
    # Issue 20 item 6: runtime/* let a job invoke any runtime of the account; a run may name only listed ones.
    listed = _job_statements(built_both["listed"][1])["InvokeTheRunAgentRuntime"]
    assert listed["Resource"] == [RUNTIME, f"{RUNTIME}/runtime-endpoint/*"]
    assert "InvokeTheRunAgentRuntime" not in _job_statements(built_both["none"][1])


def _job_statements(template: Template) -> dict[str, dict[str, Any]]:
    statements = statements_of(template, "BackendRolesServerlessJobRole")
    by_sid = {statement["Sid"]: statement for statement in statements}
    assert len(by_sid) == len(statements), "every job-role statement has its own sid"
    return by_sid


def test_job_role_grants_exactly_the_documented_actions(built: tuple[BackendRoles, Template]) -> None:
    _, template = built
    granted = {sid: sorted(actions(statement)) for sid, statement in _job_statements(template).items()}
    assert granted == {sid: sorted(listed) for sid, listed in DOCUMENTED["statements"].items()}
    # The ones issue 12 found missing (base model, input package, MLflow app) are among them.
    flat = {action for listed in granted.values() for action in listed}
    assert {
        "sagemaker:DescribeHubContent",
        "sagemaker:AccessModelPackage",
        "sagemaker:DescribeMlflowApp",
        "sagemaker:CallMlflowAppApi",
    } <= flat
    assert not any("*" in action for action in flat)
    assert "sagemaker-mlflow:*" not in flat


def test_job_role_statements_are_scoped(built: tuple[BackendRoles, Template]) -> None:
    _, template = built
    by_sid = _job_statements(template)
    resources = {sid: json.dumps(statement["Resource"]) for sid, statement in by_sid.items()}
    assert "runs/*/input/*" in resources["ReadRunInput"]
    assert "runs/*/model/*" in resources["WriteRunOutput"]
    assert "runs/*/evaluation/*" in resources["WriteRunOutput"]
    assert "training-data" not in resources["ReadRunInput"]  # the trigger prefix is never the job's input
    assert ":function:mtrl-agent-*" in resources["InvokeTheRunAgent"]
    assert ":aws:hub-content/SageMakerPublicHub/Model/*" in resources["BaseModel"]
    assert "model-package-group/mtrl-*" in resources["ModelPackages"]
    assert resources["MlflowApp"] == json.dumps("arn:aws:sagemaker:us-east-1:123456789012:mlflow-app/app-1")
    # The service writes /aws/sagemaker/Job/<category> groups and their streams.
    assert "log-group:/aws/sagemaker/Job*" in resources["JobLogs"]
    assert "log-group:/aws/sagemaker/Job*:log-stream:*" in resources["JobLogs"]
    for statement in by_sid.values():
        assert statement["Resource"] != "*"


def test_agent_role_covers_the_agents_recorded_calls(built: tuple[BackendRoles, Template]) -> None:
    # AmazonSageMakerJobRuntimeAccess (AWS managed policy reference) grants exactly AGENT_ACTIONS + bearer tokens.
    _, template = built
    agent = role(template, "mtrl-agent")
    assert any("AmazonSageMakerJobRuntimeAccess" in json.dumps(arn) for arn in agent["ManagedPolicyArns"])
    assert {"sagemaker:Sample", "sagemaker:CompleteRollout", "sagemaker:UpdateReward"} <= AGENT_ACTIONS
    assert "sts:GetCallerIdentity" in SERVERLESS_ADAPTER_ACTIONS  # needs no grant; listed so recordings match
