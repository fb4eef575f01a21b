"""The at-rest cost of the synthesized profiles and of every documented cost lever (issue 36 item 3).

Each lever is synthesized with cdk-nag (an unacknowledged finding fails the synth), and the figures come from
``mtrl.cost.at_rest`` on the templates themselves, with the us-east-1 prices of ``mtrl/cost/prices.json``.
"""

from __future__ import annotations

import dataclasses
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from mtrl.cost import CostEstimate, load_price_book
from mtrl.cost.at_rest import at_rest_cost
from mtrl.settings import SettingsError, load_settings
from stacks.app_builder import Deployment
from stacks.constructs.network import INTERFACE_ENDPOINTS
from tests.conftest import make_app

DEFAULT_GOAL_USD = Decimal(120)
SERVERLESS_GOAL_USD = Decimal(10)
PREFIX = "mtrl"
REPO_ROOT = Path(__file__).resolve().parents[3]


def templates_of(deployment: Deployment) -> dict[str, dict[str, Any]]:
    stacks = [getattr(deployment, field.name) for field in dataclasses.fields(deployment)]
    return {stack.stack_name: Template.from_stack(stack).to_json() for stack in stacks if isinstance(stack, cdk.Stack)}


def priced(deployment: Deployment) -> CostEstimate:
    return at_rest_cost(templates_of(deployment), region="us-east-1", book=load_price_book())


def amount(estimate: CostEstimate, what: str) -> Decimal:
    return sum((line.amount for line in estimate.lines if line.item.startswith(what)), Decimal(0))


def test_the_default_profile_meets_its_goal_and_keeps_the_s3_gateway_endpoint(deployment: Deployment) -> None:
    estimate = priced(deployment)
    assert estimate.total <= DEFAULT_GOAL_USD, estimate.to_dict()
    assert amount(estimate, "EKS control plane") == Decimal("73.00")
    assert amount(estimate, "NAT gateway") == Decimal("32.85")
    assert amount(estimate, "public IPv4 address") == Decimal("3.65")
    assert amount(estimate, "interface endpoint") == 0
    assert any(line.item.startswith("gateway endpoint (free)") for line in estimate.lines)


@pytest.fixture(scope="module")
def levers() -> Deployment:
    """Every documented cost lever away from its default, in one synth (cdk-nag runs in app.synth())."""
    app, deployment = make_app(
        {
            "enable_flow_logs": False,
            "create_vpc_endpoints": True,
            "nat_gateways": "per_az",
            "eks_control_plane_logs": ["audit"],
        }
    )
    app.synth()  # failed before: AwsSolutions-VPC7 on the VPC when flow logs were off
    return deployment


def test_every_cost_lever_synthesizes_and_moves_the_figure_it_documents(
    deployment: Deployment, levers: Deployment
) -> None:
    default, changed = priced(deployment), priced(levers)
    assert amount(default, "VPC flow logs") > 0
    assert amount(changed, "VPC flow logs") == 0
    # 9 services x 2 AZs x USD 0.01 x 730 h
    assert amount(changed, "interface endpoint") == Decimal("0.01") * 730 * 2 * len(INTERFACE_ENDPOINTS)
    assert amount(changed, "NAT gateway") == 2 * amount(default, "NAT gateway")
    # All five log types at the book's assumed 0.5 GB a month each, then the audit log alone (USD 0.50 per GB).
    assert amount(default, "EKS control-plane logs") == Decimal("1.25")
    assert amount(changed, "EKS control-plane logs") == Decimal("0.25")
    assert any(line.item.startswith("gateway endpoint (free)") for line in changed.lines)


@pytest.fixture(scope="module")
def serverless() -> Deployment:
    app, deployment = make_app({"deployment_profile": "serverless"})
    app.synth()  # cdk-nag runs here
    return deployment


def test_the_serverless_profile_has_no_cluster_no_nat_and_meets_its_goal(serverless: Deployment) -> None:
    assert serverless.cluster is None
    assert serverless.settings.run_backend == "serverless"
    estimate = priced(serverless)
    assert estimate.total <= SERVERLESS_GOAL_USD, estimate.to_dict()
    templates = templates_of(serverless)
    kinds = {resource["Type"] for template in templates.values() for resource in template["Resources"].values()}
    assert not kinds & {"AWS::EKS::Cluster", "AWS::SageMaker::Cluster", "AWS::EC2::NatGateway", "AWS::EC2::EIP"}
    (endpoint,) = [
        r["Properties"]
        for r in templates[f"{PREFIX}-network"]["Resources"].values()
        if r["Type"] == "AWS::EC2::VPCEndpoint"
    ]
    assert endpoint["VpcEndpointType"] == "Gateway"  # the free S3 gateway endpoint stays
    assert len(endpoint["RouteTableIds"]) == 4  # the isolated subnets' and the public (task) subnets'


def test_without_a_nat_the_sessions_loop_task_runs_in_a_public_subnet_with_a_public_ip(serverless: Deployment) -> None:
    # No NAT and no interface endpoints (USD 7.30 a month per service and AZ): the loop's task reaches SageMaker,
    # ECR and the model hub through a public IP, billed only while it runs; its security group admits nothing.
    shipped = serverless.pipeline.resolve(serverless.pipeline._backend_values["sessions"])  # what the adapter reads
    assert shipped["sessions_assign_public_ip"] is True
    subnets = [subnet["Fn::ImportValue"] for subnet in shipped["sessions_subnet_ids"]]
    assert len(subnets) == 2
    assert all("PublicSubnet" in name for name in subnets), subnets


def test_cluster_backends_are_refused_without_a_cluster() -> None:
    with pytest.raises(SettingsError, match=r"'verl' trains on the deployment's HyperPod cluster, and this deployment"):
        load_settings({"deployment_profile": "serverless", "run_backend": "verl"}, environ={})
    with pytest.raises(SettingsError, match=r"nat_gateways': 'none' is not supported with a cluster"):
        load_settings({"nat_gateways": "none"}, environ={})


def _documented(name: str, profile: str) -> tuple[Decimal, int]:
    """(the at-rest total, the alarm count) a doc's profile table row states for ``profile``."""
    for line in (REPO_ROOT / name).read_text(encoding="utf-8").splitlines():
        if line.startswith(f"| {profile} ") and "**USD " in line:
            total = re.search(r"\*\*USD ([0-9.]+)\*\*", line)
            alarms = re.search(r"(\d+) alarms", line)
            assert total, line
            assert alarms, line
            return Decimal(total[1]), int(alarms[1])
    raise AssertionError(f"{name}: no '{profile}' row with an at-rest figure")


def test_the_at_rest_figures_the_docs_quote_are_what_the_synth_prices(
    deployment: Deployment, serverless: Deployment
) -> None:
    # README "Costs: at rest and per run" and docs/operations.md "Profiles" quote `mtrl cost --at-rest`: a change of
    # the stacks or the price book moves the figure, and the docs must move with it.
    for profile, synthesized in (("default", deployment), ("serverless", serverless)):
        estimate = priced(synthesized)
        alarms = sum(1 for line in estimate.lines if line.item.startswith("alarm "))
        for name in ("README.md", "docs/operations.md"):
            assert _documented(name, profile) == (estimate.total, alarms), (name, profile)
