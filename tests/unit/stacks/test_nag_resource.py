"""nag_resource spells tokenized resources the way cdk-nag names findings, so acknowledgments stay exact."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3

from stacks.nag import nag_resource


@pytest.fixture(scope="module")
def stacks() -> tuple[cdk.Stack, cdk.Stack, s3.Bucket]:
    app = cdk.App(context={"@aws-cdk/core:enablePartitionLiterals": True})  # as cdk.json sets it
    agnostic = cdk.Stack(app, "Agnostic")
    concrete = cdk.Stack(app, "Concrete", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    bucket = s3.Bucket(agnostic, "Bucket")
    return agnostic, concrete, bucket


def test_literals_and_pseudo_parameters(stacks: tuple[cdk.Stack, cdk.Stack, s3.Bucket]) -> None:
    agnostic, concrete, _ = stacks
    assert nag_resource(agnostic, "*") == "*"
    arn = "arn:{p}:sqs:{r}:{a}:mtrl-run-*"
    assert nag_resource(concrete, arn.format(p=concrete.partition, r=concrete.region, a=concrete.account)) == (
        "arn:aws:sqs:eu-west-1:123456789012:mtrl-run-*"
    )
    assert nag_resource(agnostic, arn.format(p=agnostic.partition, r=agnostic.region, a=agnostic.account)) == (
        "arn:<AWS::Partition>:sqs:<AWS::Region>:<AWS::AccountId>:mtrl-run-*"
    )


def test_attributes_of_resources(stacks: tuple[cdk.Stack, cdk.Stack, s3.Bucket]) -> None:
    agnostic, _, bucket = stacks
    bucket_id = agnostic.get_logical_id(bucket.node.default_child)  # type: ignore[arg-type]
    assert nag_resource(agnostic, bucket.arn_for_objects("runs/*")) == f"<{bucket_id}.Arn>/runs/*"
    assert nag_resource(agnostic, bucket.bucket_name) == f"<{bucket_id}>"


def test_imports_are_spelled_by_export_name(stacks: tuple[cdk.Stack, cdk.Stack, s3.Bucket]) -> None:
    agnostic, _, _ = stacks
    assert nag_resource(agnostic, cdk.Fn.import_value("data-BucketArn") + "/envs/*") == "data-BucketArn/envs/*"


def test_unknown_intrinsics_are_refused(stacks: tuple[cdk.Stack, cdk.Stack, s3.Bucket]) -> None:
    agnostic, _, _ = stacks
    with pytest.raises(ValueError, match="cannot spell"):
        nag_resource(agnostic, cdk.Fn.select(0, cdk.Fn.split(",", cdk.Fn.import_value("x"))))
