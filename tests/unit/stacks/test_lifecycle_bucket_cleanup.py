"""The lifecycle bucket collects one prefix per script version; deleting the stack must still succeed."""

from __future__ import annotations

from aws_cdk.assertions import Match, Template

from stacks.app_builder import Deployment


def test_lifecycle_bucket_is_emptied_when_the_stack_is_deleted(deployment: Deployment) -> None:
    assert deployment.cluster is not None
    template = Template.from_stack(deployment.cluster)
    template.has_resource(
        "AWS::S3::Bucket",
        {
            "Properties": {"BucketName": Match.string_like_regexp("^sagemaker-")},
            "DeletionPolicy": "Delete",
        },
    )
    template.resource_count_is("Custom::S3AutoDeleteObjects", 1)
