"""The IAM evaluator on hand-written policies: each case states what the IAM User Guide says the decision is
(pages "Policy evaluation logic", "Condition operators", "Single-valued vs. multivalued context keys")."""

from __future__ import annotations

from typing import Any

import pytest

from tests.contract.iam_contract import ABSENT, IamRequest, Outcome, evaluate, statements_of

BUCKET = "arn:aws:s3:::data"


def decide(statements: list[dict[str, Any]], action: str, resource: str, **kwargs: Any) -> Any:
    context = kwargs.pop("context", {})
    return evaluate(statements_of({"Statement": statements}, "test"), IamRequest(action, resource, context), **kwargs)


def allow(action: Any, resource: Any, **extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": action, "Resource": resource, **extra}


def test_nothing_allows_is_an_implicit_deny() -> None:
    decision = decide([allow("s3:GetObject", f"{BUCKET}/runs/*")], "s3:PutObject", f"{BUCKET}/runs/x")
    assert decision.outcome is Outcome.DENIED
    assert "implicitly denied" in decision.reason


def test_action_wildcards_are_case_insensitive_resources_are_not() -> None:
    statements = [allow("S3:get*", f"{BUCKET}/runs/*"), allow("sqs:?eceiveMessage", "arn:aws:sqs:*:*:q")]
    assert decide(statements, "s3:GetObject", f"{BUCKET}/runs/a/b.json").allowed
    assert not decide(statements, "s3:GetObject", f"{BUCKET}/RUNS/a").allowed
    assert decide(statements, "sqs:ReceiveMessage", "arn:aws:sqs:us-east-1:1:q").allowed
    assert not decide(statements, "sqs:ReceiveMessages", "arn:aws:sqs:us-east-1:1:q").allowed


def test_resource_wildcards_stay_inside_their_arn_segment() -> None:
    statements = [allow("lambda:InvokeFunction", "arn:aws:lambda:*:111122223333:function:mtrl-*")]
    assert decide(statements, "lambda:InvokeFunction", "arn:aws:lambda:us-east-1:111122223333:function:mtrl-a").allowed
    # "*" in the region segment does not swallow the account segment.
    assert not decide(
        statements, "lambda:InvokeFunction", "arn:aws:lambda:us-east-1:444455556666:function:mtrl-a"
    ).allowed
    question = [allow("s3:GetObject", f"{BUCKET}/v?.json")]
    assert decide(question, "s3:GetObject", f"{BUCKET}/v1.json").allowed
    assert not decide(question, "s3:GetObject", f"{BUCKET}/v10.json").allowed


def test_explicit_deny_wins_over_allow() -> None:
    statements = [
        allow("s3:*", "*", Sid="All"),
        {"Effect": "Deny", "Action": "s3:DeleteObject", "Resource": f"{BUCKET}/*", "Sid": "NoDelete"},
    ]
    decision = decide(statements, "s3:DeleteObject", f"{BUCKET}/x")
    assert decision.outcome is Outcome.DENIED
    assert decision.reason == "explicitly denied by test/NoDelete"
    assert decide(statements, "s3:GetObject", f"{BUCKET}/x").allowed


def test_not_action_and_not_resource() -> None:
    statements = [{"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}]
    assert decide(statements, "s3:GetObject", f"{BUCKET}/x").allowed
    assert not decide(statements, "iam:PassRole", "arn:aws:iam::1:role/r").allowed
    deny_outside = [
        allow("s3:GetObject", "*"),
        {"Effect": "Deny", "Action": "s3:*", "NotResource": [BUCKET, f"{BUCKET}/*"]},
    ]
    assert decide(deny_outside, "s3:GetObject", f"{BUCKET}/k").allowed
    assert decide(deny_outside, "s3:GetObject", "arn:aws:s3:::other/k").outcome is Outcome.DENIED


def test_string_conditions_and_their_negations() -> None:
    pass_role = [
        allow("iam:PassRole", "*", Condition={"StringEquals": {"iam:PassedToService": ["ecs-tasks.amazonaws.com"]}})
    ]
    request = ("iam:PassRole", "arn:aws:iam::1:role/r")
    assert decide(pass_role, *request, context={"iam:PassedToService": "ecs-tasks.amazonaws.com"}).allowed
    assert not decide(pass_role, *request, context={"iam:PassedToService": "lambda.amazonaws.com"}).allowed
    # Condition key names are case-insensitive; StringEquals values are not.
    assert decide(pass_role, *request, context={"IAM:passedtoservice": "ecs-tasks.amazonaws.com"}).allowed
    assert not decide(pass_role, *request, context={"iam:PassedToService": "ECS-tasks.amazonaws.com"}).allowed
    not_equals = [allow("s3:PutObject", "*", Condition={"StringNotEquals": {"s3:x-amz-acl": "public-read"}})]
    assert decide(not_equals, "s3:PutObject", "arn:aws:s3:::b/k", context={"s3:x-amz-acl": "private"}).allowed
    assert not decide(not_equals, "s3:PutObject", "arn:aws:s3:::b/k", context={"s3:x-amz-acl": "public-read"}).allowed
    # A negated operator on a missing key is true; a positive one false.
    assert decide(not_equals, "s3:PutObject", "arn:aws:s3:::b/k", context={"s3:x-amz-acl": ABSENT}).allowed
    assert not decide(pass_role, *request, context={"iam:PassedToService": ABSENT}).allowed
    like = [allow("s3:ListBucket", BUCKET, Condition={"StringLike": {"s3:prefix": ["envs/*"]}})]
    assert decide(like, "s3:ListBucket", BUCKET, context={"s3:prefix": "envs/wordle/"}).allowed
    assert not decide(like, "s3:ListBucket", BUCKET, context={"s3:prefix": "runs/"}).allowed
    not_like = [allow("s3:ListBucket", BUCKET, Condition={"StringNotLike": {"s3:prefix": ["secret/*", "keys/*"]}})]
    assert not decide(not_like, "s3:ListBucket", BUCKET, context={"s3:prefix": "keys/a"}).allowed
    assert decide(not_like, "s3:ListBucket", BUCKET, context={"s3:prefix": "envs/"}).allowed
    ignore_case = [allow("x:Y", "*", Condition={"StringEqualsIgnoreCase": {"aws:PrincipalTag/team": "ML"}})]
    assert decide(ignore_case, "x:Y", "*", context={"aws:PrincipalTag/team": "ml"}).allowed


def test_arn_conditions() -> None:
    statements = [
        allow(
            "ecs:RunTask",
            "*",
            Condition={"ArnEquals": {"ecs:cluster": "arn:aws:ecs:us-east-1:1:cluster/rewards"}},
        ),
        allow("ecs:StopTask", "*", Condition={"ArnLike": {"ecs:cluster": "arn:aws:ecs:*:1:cluster/rew*"}}),
        allow("ecs:ListTasks", "*", Condition={"ArnNotLike": {"ecs:cluster": "arn:aws:ecs:*:*:cluster/prod-*"}}),
    ]
    rewards = {"ecs:cluster": "arn:aws:ecs:us-east-1:1:cluster/rewards"}
    other = {"ecs:cluster": "arn:aws:ecs:us-east-1:1:cluster/other"}
    assert decide(statements, "ecs:RunTask", "*", context=rewards).allowed
    assert not decide(statements, "ecs:RunTask", "*", context=other).allowed
    assert decide(statements, "ecs:StopTask", "*", context=rewards).allowed
    assert not decide(
        statements, "ecs:StopTask", "*", context={"ecs:cluster": "arn:aws:ecs:us-east-1:2:cluster/rewards"}
    ).allowed
    assert decide(statements, "ecs:ListTasks", "*", context=other).allowed
    assert not decide(
        statements, "ecs:ListTasks", "*", context={"ecs:cluster": "arn:aws:ecs:us-east-1:1:cluster/prod-a"}
    ).allowed


def test_bool_null_numeric_date_ip_and_if_exists() -> None:
    bool_ = [allow("lambda:InvokeFunction", "*", Condition={"Bool": {"lambda:InvokedViaFunctionUrl": "true"}})]
    assert decide(bool_, "lambda:InvokeFunction", "*", context={"lambda:InvokedViaFunctionUrl": True}).allowed
    assert not decide(bool_, "lambda:InvokeFunction", "*", context={"lambda:InvokedViaFunctionUrl": False}).allowed
    assert not decide(bool_, "lambda:InvokeFunction", "*", context={"lambda:InvokedViaFunctionUrl": ABSENT}).allowed
    null = [allow("x:Y", "*", Condition={"Null": {"aws:TokenIssueTime": "false"}})]
    assert decide(null, "x:Y", "*", context={"aws:TokenIssueTime": "2026-01-01T00:00:00Z"}).allowed
    assert not decide(null, "x:Y", "*", context={"aws:TokenIssueTime": ABSENT}).allowed
    numeric = [allow("s3:ListBucket", "*", Condition={"NumericLessThanEquals": {"s3:max-keys": "10"}})]
    assert decide(numeric, "s3:ListBucket", "*", context={"s3:max-keys": 10}).allowed
    assert not decide(numeric, "s3:ListBucket", "*", context={"s3:max-keys": "11"}).allowed
    date = [allow("x:Y", "*", Condition={"DateLessThan": {"aws:CurrentTime": "2027-01-01T00:00:00Z"}})]
    assert decide(date, "x:Y", "*", context={"aws:CurrentTime": "2026-12-01T10:00:00Z"}).allowed
    assert not decide(date, "x:Y", "*", context={"aws:CurrentTime": "2027-06-01T00:00:00Z"}).allowed
    ip = [allow("x:Y", "*", Condition={"IpAddress": {"aws:SourceIp": "10.0.0.0/16"}})]
    assert decide(ip, "x:Y", "*", context={"aws:SourceIp": "10.0.3.4"}).allowed
    assert not decide(ip, "x:Y", "*", context={"aws:SourceIp": "10.1.0.1"}).allowed
    if_exists = [
        allow("ecs:RunTask", "*", Condition={"ArnEqualsIfExists": {"ecs:cluster": "arn:aws:ecs:r:1:cluster/c"}})
    ]
    assert decide(if_exists, "ecs:RunTask", "*", context={"ecs:cluster": ABSENT}).allowed
    assert not decide(if_exists, "ecs:RunTask", "*", context={"ecs:cluster": "arn:aws:ecs:r:1:cluster/d"}).allowed


def test_multivalued_keys() -> None:
    any_value = [allow("ecs:RunTask", "*", Condition={"ForAnyValue:StringEquals": {"aws:TagKeys": ["mtrl:run-id"]}})]
    all_values = [allow("ecs:RunTask", "*", Condition={"ForAllValues:StringLike": {"aws:TagKeys": ["mtrl:*"]}})]
    assert decide(any_value, "ecs:RunTask", "*", context={"aws:TagKeys": ["a", "mtrl:run-id"]}).allowed
    assert not decide(any_value, "ecs:RunTask", "*", context={"aws:TagKeys": ["a"]}).allowed
    assert not decide(any_value, "ecs:RunTask", "*", context={"aws:TagKeys": ABSENT}).allowed  # false when missing
    assert decide(all_values, "ecs:RunTask", "*", context={"aws:TagKeys": ["mtrl:a", "mtrl:b"]}).allowed
    assert not decide(all_values, "ecs:RunTask", "*", context={"aws:TagKeys": ["mtrl:a", "owner"]}).allowed
    assert decide(all_values, "ecs:RunTask", "*", context={"aws:TagKeys": ABSENT}).allowed  # true when missing
    single = [allow("ecs:RunTask", "*", Condition={"StringEquals": {"aws:TagKeys": "a"}})]
    with pytest.raises(ValueError, match="multi-valued"):
        decide(single, "ecs:RunTask", "*", context={"aws:TagKeys": ["a", "b"]})


def test_keys_and_operators_and_together_values_or_together() -> None:
    statements = [
        allow(
            "iam:PassRole",
            "*",
            Condition={
                "StringEquals": {"iam:PassedToService": ["ecs-tasks.amazonaws.com", "lambda.amazonaws.com"]},
                "ArnLike": {"iam:AssociatedResourceArn": "arn:aws:ecs:*:1:task-definition/mtrl-*"},
            },
        )
    ]
    ok = {
        "iam:PassedToService": "lambda.amazonaws.com",
        "iam:AssociatedResourceArn": "arn:aws:ecs:r:1:task-definition/mtrl-a:1",
    }
    assert decide(statements, "iam:PassRole", "*", context=ok).allowed
    assert not decide(
        statements,
        "iam:PassRole",
        "*",
        context={**ok, "iam:AssociatedResourceArn": "arn:aws:ecs:r:1:task-definition/x:1"},
    ).allowed


def test_unknowable_conditions_are_reported_and_accepted_only_explicitly() -> None:
    statements = [
        allow("s3:GetObject", f"{BUCKET}/*", Sid="FromVpc", Condition={"StringEquals": {"aws:SourceVpc": "vpc-1"}})
    ]
    decision = decide(statements, "s3:GetObject", f"{BUCKET}/k")
    assert decision.outcome is Outcome.UNVERIFIED
    assert decision.unverified_keys == {"aws:SourceVpc"}
    assert "test/FromVpc (if aws:SourceVpc)" in decision.reason
    accepted = decide(
        statements, "s3:GetObject", f"{BUCKET}/k", accept_unverified={"aws:sourcevpc": "tasks run in the VPC"}
    )
    assert accepted.allowed
    # Accepting another key does not accept this one.
    assert (
        decide(statements, "s3:GetObject", f"{BUCKET}/k", accept_unverified={"aws:SourceIp": "x"}).outcome
        is Outcome.UNVERIFIED
    )
    # A known value that fails the condition is a plain deny, whatever is accepted.
    stated = decide(
        statements,
        "s3:GetObject",
        f"{BUCKET}/k",
        context={"aws:SourceVpc": "vpc-2"},
        accept_unverified={"aws:SourceVpc": "x"},
    )
    assert stated.outcome is Outcome.DENIED


def test_a_deny_on_an_unknown_key_makes_an_allow_unverified() -> None:
    statements = [
        allow("s3:*", "*"),
        {
            "Effect": "Deny",
            "Action": "s3:*",
            "Resource": "*",
            "Sid": "TlsOnly",
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        },
    ]
    decision = decide(statements, "s3:GetObject", f"{BUCKET}/k")
    assert decision.outcome is Outcome.UNVERIFIED
    assert "may be denied by test/TlsOnly" in decision.reason
    # Accepting the key means its Deny does not trigger (the caller vouches the request uses TLS).
    accepted = decide(statements, "s3:GetObject", f"{BUCKET}/k", accept_unverified={"aws:SecureTransport": "TLS"})
    assert accepted.allowed
    assert decide(statements, "s3:GetObject", f"{BUCKET}/k", context={"aws:SecureTransport": True}).allowed
    assert (
        decide(statements, "s3:GetObject", f"{BUCKET}/k", context={"aws:SecureTransport": False}).outcome
        is Outcome.DENIED
    )


def test_policy_variables_are_substituted_or_unverified() -> None:
    statements = [allow("s3:GetObject", BUCKET + "/home/${aws:username}/*")]
    assert decide(statements, "s3:GetObject", f"{BUCKET}/home/ana/x", context={"aws:username": "ana"}).allowed
    assert not decide(statements, "s3:GetObject", f"{BUCKET}/home/bob/x", context={"aws:username": "ana"}).allowed
    assert decide(statements, "s3:GetObject", f"{BUCKET}/home/ana/x").outcome is Outcome.UNVERIFIED


def test_malformed_or_unsupported_policies_fail_loudly() -> None:
    with pytest.raises(ValueError, match="exactly one of Action/NotAction"):
        statements_of({"Statement": [{"Effect": "Allow", "Resource": "*"}]}, "p")
    with pytest.raises(ValueError, match="unresolved value"):
        statements_of({"Statement": [allow("s3:GetObject", {"Fn::GetAtt": ["B", "Arn"]})]}, "p")
    with pytest.raises(ValueError, match="unsupported condition operator"):
        decide([allow("x:Y", "*", Condition={"StringSort": {"k": "v"}})], "x:Y", "*", context={"k": "v"})
