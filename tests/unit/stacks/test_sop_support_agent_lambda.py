"""The serverless backend deploys an agent Lambda for sop_support too, and its code carries the fixtures."""

from __future__ import annotations

from aws_cdk.assertions import Match, Template

from stacks.app_builder import Deployment
from stacks.constructs.python_function import stage_function_code


def test_sop_support_has_its_agent_with_the_environment_id(deployment: Deployment) -> None:
    assert deployment.backends is not None
    assert "sop_support" in deployment.backends.agents
    Template.from_stack(deployment.backends).has_resource_properties(
        "AWS::Lambda::Function",
        {
            "FunctionName": "mtrl-agent-sop_support",
            "Handler": "handler.handler",
            "Environment": {"Variables": Match.object_like({"MTRL_ENV_ID": "sop_support"})},
        },
    )


def test_the_agent_code_carries_the_fixtures_and_sample() -> None:
    staged = stage_function_code("serverless_agent")
    package = staged / "environments" / "sop_support"
    for name in ("customers.csv", "order_history.jsonl", "shipments.csv", "policies.csv", "tickets.csv"):
        assert (package / "fixtures" / name).is_file(), name
    assert (package / "sample" / "eval.jsonl").is_file()
    assert (staged / "mtrl" / "envs" / "tools.py").is_file()
