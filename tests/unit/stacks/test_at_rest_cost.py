"""The at-rest cost of the synthesized profiles and of every documented cost lever (issue 36 item 3).

Each lever is synthesized with cdk-nag (an unacknowledged finding fails the synth), and the figures come from
``mtrl.cost.at_rest`` on the templates themselves, with the us-east-1 prices of ``mtrl/cost/prices.json``.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from mtrl.cost import CostEstimate, load_price_book
from mtrl.cost.at_rest import at_rest_cost
from stacks.app_builder import Deployment
from stacks.constructs.network import INTERFACE_ENDPOINTS
from tests.conftest import make_app

DEFAULT_GOAL_USD = Decimal(120)


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
    app, deployment = make_app({"enable_flow_logs": False, "create_vpc_endpoints": True, "nat_gateways": "per_az"})
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
    assert any(line.item.startswith("gateway endpoint (free)") for line in changed.lines)
