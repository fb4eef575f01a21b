"""The Validate function's memory is chosen for CPU: Lambda gives one full vCPU at 1,769 MB.

Source: AWS Lambda Developer Guide, "Configure Lambda function memory" ("at 1,769 MB, a function has the equivalent of
one vCPU"). The validator is single-threaded, so that is the setting at which it runs at full speed
(docs/operations.md gives the dataset size it validates in 10 minutes there, from benchmarks/bench_validation.py).
"""

from __future__ import annotations

from aws_cdk.assertions import Match, Template

from stacks.app_builder import Deployment
from stacks.constructs.pipeline_functions import VALIDATE_MEMORY_MB


def test_validate_gets_one_full_vcpu(deployment: Deployment) -> None:
    assert VALIDATE_MEMORY_MB == 1769
    Template.from_stack(deployment.pipeline).has_resource_properties(
        "AWS::Lambda::Function",
        {"Description": Match.string_like_regexp("^Validate a dataset"), "MemorySize": 1769, "Timeout": 900},
    )
