"""The IAM contract: is each recorded AWS call allowed for a role by that role's policies as synthesized?

Import it by this absolute path everywhere (``from tests.contract.iam_contract import …``), so every test shares one
module, one cache and one synth.

API
---
``AwsCall(service, operation, params, region, context={})``
    One call as botocore names it (``AwsCall("s3", "HeadObject", {"Bucket": b, "Key": k}, "us-east-1")``).
    ``AwsCall.from_record(d)`` / ``call.to_record()``: JSONL records with keys service/operation/params/region
    (and optional context). ``function_url_call(url, function_name)``: an HTTP call to a Lambda function URL.
``CallRecorder``
    ``with CallRecorder() as recorder: …`` records every botocore call (at ``BaseClient._make_api_call``, so
    moto-answered and fake-answered calls alike); ``recorder.calls``, ``recorder.write_jsonl(path)``,
    ``read_jsonl(path)``.
``AppModel.synth()`` / the session fixture ``app_model`` (tests/contract/conftest.py)
    The whole app synthesized in-process once (account 111122223333, us-east-1, path metadata, AZ context).
    ``model.role("<construct path fragment>") -> RolePolicies`` (inline ``Policies``, every ``AWS::IAM::Policy`` and
    ``AWS::IAM::ManagedPolicy`` attached through ``Roles`` in any stack, customer-managed ``ManagedPolicyArns``;
    AWS-managed ones listed in ``aws_managed``). ``model.physical_name(fragment)``, ``model.arn_of(fragment)``,
    ``model.attribute(fragment, "Arn")``, ``model.function_environment(fragment)``, ``model.resolve(stack, value)``:
    the exact names the policies use, to build a fake environment from.
``assert_calls_allowed(calls, role, *, model, context=None, accept_unverified=None, managed_grants=None)``
    ``role``: a construct path fragment or a ``RolePolicies``. Raises AssertionError listing every request not
    allowed, one line each: ``service.Operation → action on resource: reason``. Returns the decisions.
    ``context``: condition keys every call carries (``{"aws:SourceVpc": "vpc-1"}``).
    ``accept_unverified``: ``{condition key: why}`` for keys the test cannot know (a decision that depends on one is
    ``UNVERIFIED`` and fails until accepted).
    ``managed_grants``: ``{"service-role/AWSLambdaBasicExecutionRole": [statements]}`` — what an AWS-managed policy
    grants, quoted from its documentation page (say which in a comment); without it a call allowed only through an
    AWS-managed policy fails naming that policy.
``explain_calls(...)`` (same arguments, never raises) and ``markdown_table(decisions)`` for reports.
``requests_for(call, Env.of(model))``: the IAM requests (action, resource, context keys) of one call;
``OPERATIONS``: the mapping table. An operation not in it fails: "no IAM mapping for service.Operation".

Lower level: ``Statement``, ``statements_of(document, source)``, ``evaluate(statements, request, …)``,
``IamRequest``, ``ABSENT`` (a condition key known to be missing from the request), ``Outcome``, ``Decision``.

Not modelled: resource-based policies (bucket, key, queue policies), permission boundaries, SCPs and session
policies — the contract checks the identity side only.
"""

from __future__ import annotations

from tests.contract.iam.contract import (
    CallDecision,
    CallRecorder,
    assert_calls_allowed,
    explain_calls,
    markdown_table,
    read_jsonl,
)
from tests.contract.iam.model import AppModel, ModelError, RolePolicies
from tests.contract.iam.operations import OPERATIONS, AwsCall, Env, NoMapping
from tests.contract.iam.policy import ABSENT, Decision, IamRequest, Outcome, Statement, evaluate, statements_of
from tests.contract.iam.requests import requests_for
from tests.contract.iam.requests_compute import function_url_call

__all__ = [
    "ABSENT",
    "OPERATIONS",
    "AppModel",
    "AwsCall",
    "CallDecision",
    "CallRecorder",
    "Decision",
    "Env",
    "IamRequest",
    "ModelError",
    "NoMapping",
    "Outcome",
    "RolePolicies",
    "Statement",
    "assert_calls_allowed",
    "evaluate",
    "explain_calls",
    "function_url_call",
    "markdown_table",
    "read_jsonl",
    "requests_for",
    "statements_of",
]
