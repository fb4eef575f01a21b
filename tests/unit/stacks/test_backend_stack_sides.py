"""Each backend's stack side is found through its descriptor: the composition root names no backend's key, and a
backend registered with ``register_backend`` plus its stack side is deployed with no edit to
``stacks/app_builder.py``."""

from __future__ import annotations

import ast
import inspect
import json
from collections.abc import Iterator
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template
from pydantic import BaseModel

from mtrl.backends.hyperpod.common import HyperPodSettings
from mtrl.backends.serverless.settings import ServerlessSettings
from mtrl.backends.verl.config import VerlRunConfig
from mtrl.contracts.descriptor import BackendDescriptor
from mtrl.contracts.registry import descriptor_for, register_backend, unregister_backend
from stacks import app_builder
from stacks.backends.contract import StackInputs, StackSide, stack_side_for
from stacks.backends.permissions import BackendFunctionPolicy
from tests.conftest import make_app
from tests.unit.stacks.template_tools import shipped_backend_values

TOY_QUEUE = "arn:aws:sqs:us-east-1:123456789012:toy-jobs"


class ToySettings(BaseModel):
    """The toy adapter's settings model: what its stack side ships is an instance of it."""

    region: str
    toy_queue_arn: str
    toy_max_jobs: int
    toy_dry_run: bool
    toy_namespace: str = "toy"


class ToyStackSide:
    def add_to_pipeline(self, inputs: StackInputs) -> None:
        BackendFunctionPolicy(
            inputs.scope,
            "BackendPermissionsToy",
            role=inputs.function_role,
            statements=[iam.PolicyStatement(sid="ToySendJobs", actions=["sqs:SendMessage"], resources=[TOY_QUEUE])],
            wildcard_reasons={},
        )
        cdk.CfnOutput(inputs.scope, "ToyQueueArn", value=TOY_QUEUE)  # a construct only the toy needs

    def pipeline_values(self, inputs: StackInputs) -> ToySettings:
        return ToySettings.model_construct(
            region=inputs.region, toy_queue_arn=TOY_QUEUE, toy_max_jobs=3, toy_dry_run=True
        )


class ToyOffStackSide:
    """A backend whose descriptor's deploy_check refuses every deployment: its side must never be called."""

    def add_to_pipeline(self, inputs: StackInputs) -> None:
        BackendFunctionPolicy(
            inputs.scope,
            "BackendPermissionsOffToy",
            role=inputs.function_role,
            statements=[iam.PolicyStatement(sid="ToyOffJobs", actions=["sqs:SendMessage"], resources=[TOY_QUEUE])],
            wildcard_reasons={},
        )

    def pipeline_values(self, inputs: StackInputs) -> ToySettings:
        return ToySettings.model_construct(region=inputs.region, toy_queue_arn=TOY_QUEUE)


def _toy_off_problem(settings: Any) -> str:
    return "run_backend: 'toyoff' needs toy_switch, which this deployment does not set"


def _string_constants(source: str) -> set[str]:
    return {
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def test_the_composition_root_names_no_backend_key() -> None:
    """No field of any adapter's settings model appears as a key (a string) in stacks/app_builder.py, nor is any value
    converted to a string there: each backend's stack side builds its own typed values."""
    source = inspect.getsource(app_builder)
    keys = {name for model in (HyperPodSettings, ServerlessSettings, VerlRunConfig) for name in model.model_fields}
    assert _string_constants(source) & keys == set()
    wire = inspect.getsource(app_builder._wire_backends)
    for conversion in ('"true"', '"false"', "str(", "json.dumps"):
        assert conversion not in wire
    for backend in ("hyperpod", "serverless", "verl"):
        assert backend not in _string_constants(wire)


def test_each_built_in_backend_names_its_stack_side() -> None:
    for backend in ("hyperpod", "serverless", "verl"):
        side = stack_side_for(backend)
        assert isinstance(side, StackSide)
        assert descriptor_for(backend).stack_side == f"stacks.backends.{backend}:{type(side).__name__}"
    assert stack_side_for("local") is None  # the local backend needs nothing deployed


@pytest.fixture(scope="module")
def toy_pipeline() -> Iterator[dict[str, Any]]:
    register_backend(BackendDescriptor(name="toy", adapter=lambda: None, stack_side=f"{__name__}:ToyStackSide"))
    register_backend(
        BackendDescriptor(
            name="toyoff",
            adapter=lambda: None,
            deploy_check=_toy_off_problem,
            stack_side=f"{__name__}:ToyOffStackSide",
        )
    )
    try:
        _app, deployment = make_app()
        yield Template.from_stack(deployment.pipeline).to_json()
    finally:
        unregister_backend("toy")
        unregister_backend("toyoff")


def test_a_registered_backend_gets_its_values_shipped_typed(toy_pipeline: dict[str, Any]) -> None:
    shipped = shipped_backend_values(toy_pipeline)
    assert shipped["toy"] == {"region": "us-east-1", "toy_queue_arn": TOY_QUEUE, "toy_max_jobs": 3, "toy_dry_run": True}
    assert ToySettings.model_validate(shipped["toy"]).toy_max_jobs == 3
    # The built-ins this deployment can run are still there (hyperpod only with Nova Forge configured).
    assert {"serverless", "sessions", "verl"} <= set(shipped)


def test_a_registered_backend_gets_its_permissions_and_constructs(toy_pipeline: dict[str, Any]) -> None:
    resources = toy_pipeline["Resources"]
    (policy,) = [r for name, r in resources.items() if name.startswith("BackendPermissionsToy")]
    assert policy["Type"] == "AWS::IAM::Policy"
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert (statement["Sid"], statement["Action"], statement["Resource"]) == (
        "ToySendJobs",
        "sqs:SendMessage",
        TOY_QUEUE,
    )
    backend_role = json.dumps(policy["Properties"]["Roles"])
    assert "FunctionsBackendRole" in backend_role  # on the backend function's role
    assert toy_pipeline["Outputs"]["ToyQueueArn"]["Value"] == TOY_QUEUE


def test_a_backend_the_deployment_cannot_run_contributes_nothing(toy_pipeline: dict[str, Any]) -> None:
    """The rule is the descriptor's (DeploySettings.backend_problem: needs_cluster, deploy_check), applied by
    stacks.backends.contract.deployed_sides to every backend alike: no policy on the backend function, no values."""
    assert "toyoff" not in shipped_backend_values(toy_pipeline)
    assert not [name for name in toy_pipeline["Resources"] if name.startswith("BackendPermissionsOffToy")]
    assert "ToyOffJobs" not in json.dumps(toy_pipeline["Resources"])
