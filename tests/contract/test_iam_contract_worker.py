"""Defect 6: reward workers reach the Nova Forge proxy, whose function URL ``setup()`` switches to AuthType AWS_IAM.

The fake function URL is a real HTTP server on 127.0.0.1 that does what Lambda does with an IAM-auth URL
(Lambda guide, "Control access to Lambda function URLs"): a request without a valid SigV4 signature for service
``lambda`` is refused with 403; the signature is recomputed with botocore from the received request. Then the
worker's own calls — SQS through moto and the signed HTTP call — are checked against the worker task role.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import urllib.error
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from mtrl.backends.hyperpod import HyperPodSettings
from mtrl.backends.hyperpod.naming import SDK_STACK_SUFFIX, run_stack_base, worker_role_name
from mtrl.backends.hyperpod.worker_role import run_policy_document
from mtrl.worker.__main__ import ConfigError, policy_from_env
from mtrl.worker.runtime import RolloutOutcome
from mtrl.worker.transport import HttpChatPolicy, SigV4Signer, SqsResultSink, SqsRolloutSource, function_url_region
from tests.contract.iam_contract import (
    AppModel,
    AwsCall,
    CallRecorder,
    RolePolicies,
    assert_calls_allowed,
    explain_calls,
    function_url_call,
    statements_of,
)
from tests.contract.recorded_runs import model_account_aws
from tests.http_serving import serving

WORKER_ROLE = "mtrl-reward-workers/RewardWorkers/TaskRole"  # the task definition's shared role
RUN_ID = "wordle-20261201-abc"
KEY, SECRET, TOKEN = "ASIAWORKERTASKROLE01", "worker-secret", "worker-session-token"
_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
    r"SignedHeaders=([^,]+), Signature=([0-9a-f]{64})$"
)


@dataclass
class FunctionUrl:
    """What the fake URL saw: each request's headers and whether it was accepted."""

    region: str = "us-east-1"
    seen: list[tuple[dict[str, str], int]] = field(default_factory=list)

    def check(self, method: str, host: str, path: str, headers: dict[str, str], body: bytes) -> str | None:
        """Why the request is refused (None: it is correctly signed)."""
        lower = {k.lower(): v for k, v in headers.items()}
        match = _AUTH.match(lower.get("authorization", ""))
        if match is None:
            return "missing or malformed SigV4 Authorization"
        key, day, region, service, signed, signature = match.groups()
        names = signed.split(";")
        stamp = lower.get("x-amz-date", "")
        when = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC) if stamp else None
        problems = [
            (
                (key, region, service) != (KEY, self.region, "lambda"),
                f"credential scope {key}/{region}/{service} is not {KEY}/{self.region}/lambda",
            ),
            (lower.get("x-amz-security-token") != TOKEN, "session token missing or wrong"),
            (
                when is None or abs((datetime.now(UTC) - when).total_seconds()) > 300 or stamp[:8] != day,
                "X-Amz-Date missing, skewed or not the credential's day",
            ),
            (
                lower.get("x-amz-content-sha256") != hashlib.sha256(body).hexdigest(),
                "X-Amz-Content-SHA256 does not match the body",
            ),
            (
                not {"host", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256"} <= set(names),
                f"signed headers {names} leave out what must be signed",
            ),
            (any(name not in lower for name in names), "a signed header is missing from the request"),
        ]
        failed = [why for bad, why in problems if bad]
        if failed:
            return failed[0]
        request = AWSRequest(method=method, url=f"http://{host}{path}", data=body, headers={n: lower[n] for n in names})
        request.context["timestamp"] = stamp
        auth = SigV4Auth(Credentials(KEY, SECRET, TOKEN), "lambda", region)
        expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
        return None if hmac.compare_digest(expected, signature) else "signature does not match"


@pytest.fixture
def function_url() -> Iterator[tuple[FunctionUrl, str]]:
    state = FunctionUrl()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            problem = state.check("POST", self.headers["Host"], self.path, dict(self.headers.items()), body)
            status = 403 if problem else 200
            state.seen.append((dict(self.headers.items()), status))
            reply = (
                {"Message": "Forbidden", "why": problem}
                if problem
                else {"choices": [{"message": {"role": "assistant", "content": "CRANE"}}]}
            )
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            pass

    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as server:
        yield state, f"http://127.0.0.1:{server.server_address[1]}/"


def task_role_credentials() -> Credentials:
    return Credentials(KEY, SECRET, TOKEN)


MESSAGES = [{"role": "user", "content": "guess"}]


def test_an_unsigned_request_is_refused(function_url: tuple[FunctionUrl, str]) -> None:
    state, url = function_url
    with pytest.raises(urllib.error.HTTPError) as refused:
        HttpChatPolicy(url).act(MESSAGES, timeout_s=5)  # what the worker sent before the fix
    assert refused.value.code == 403
    assert state.seen[-1][1] == 403


def test_a_signed_request_carries_the_sigv4_headers_and_is_accepted(function_url: tuple[FunctionUrl, str]) -> None:
    state, url = function_url
    policy = HttpChatPolicy(url, signer=SigV4Signer(task_role_credentials, "us-east-1"))
    assert policy.act(MESSAGES, timeout_s=5) == "CRANE"
    headers, status = state.seen[-1]
    assert status == 200
    names = {name.lower() for name in headers}
    assert {"authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256"} <= names
    assert headers["Authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={KEY}/")
    assert "/us-east-1/lambda/aws4_request" in headers["Authorization"]


@pytest.mark.parametrize(
    ("signer", "why"),
    [
        (SigV4Signer(lambda: Credentials(KEY, "wrong-secret", TOKEN), "us-east-1"), "signature does not match"),
        (SigV4Signer(task_role_credentials, "eu-west-1"), "credential scope"),
        (SigV4Signer(task_role_credentials, "us-east-1", service="execute-api"), "credential scope"),
    ],
)
def test_a_wrongly_signed_request_is_refused(
    function_url: tuple[FunctionUrl, str], signer: SigV4Signer, why: str
) -> None:
    state, url = function_url
    with pytest.raises(urllib.error.HTTPError) as refused:
        HttpChatPolicy(url, signer=signer).act(MESSAGES, timeout_s=5)
    assert refused.value.code == 403
    assert state.seen[-1][1] == 403
    assert why in json.loads(refused.value.read())["why"]


def test_a_signature_does_not_cover_another_body(function_url: tuple[FunctionUrl, str]) -> None:
    state, url = function_url
    host = url.split("/")[2]
    signed = SigV4Signer(task_role_credentials, "us-east-1").sign("POST", url + "chat/completions", b'{"a":1}', {})
    sent = {**signed, "Host": host}  # what urllib adds from the URL
    assert state.check("POST", host, "/chat/completions", sent, b'{"a":2}') == (
        "X-Amz-Content-SHA256 does not match the body"
    )
    assert state.check("POST", host, "/chat/completions", sent, b'{"a":1}') is None
    assert state.check("POST", host, "/chat/other", sent, b'{"a":1}') == "signature does not match"


def test_the_worker_signs_function_urls_by_default() -> None:
    proxy = "https://abcdef123456.lambda-url.eu-west-1.on.aws/"
    assert function_url_region(proxy) == "eu-west-1"
    assert function_url_region("https://model.example.com/v1") is None
    policy = policy_from_env({"MTRL_POLICY_URL": proxy}, credentials=task_role_credentials)
    assert policy.signer is not None
    assert policy.signer.region == "eu-west-1"
    assert policy.signer.service == "lambda"
    assert policy_from_env({"MTRL_POLICY_URL": "http://127.0.0.1:8000"}).signer is None
    assert policy_from_env({"MTRL_POLICY_URL": proxy, "MTRL_POLICY_AUTH": "none"}).signer is None
    forced = policy_from_env(
        {"MTRL_POLICY_URL": "http://127.0.0.1:8000", "MTRL_POLICY_AUTH": "aws_iam", "AWS_REGION": "us-west-2"},
        credentials=task_role_credentials,
    )
    assert forced.signer is not None
    assert forced.signer.region == "us-west-2"
    with pytest.raises(ConfigError, match="signing region"):
        policy_from_env({"MTRL_POLICY_URL": "http://127.0.0.1:8000", "MTRL_POLICY_AUTH": "aws_iam"})
    with pytest.raises(ConfigError, match="MTRL_POLICY_AUTH"):
        policy_from_env({"MTRL_POLICY_URL": proxy, "MTRL_POLICY_AUTH": "sigv2"})


# -- the worker role's IAM contract ---------------------------------------------------------------------------


def run_names(run_id: str) -> tuple[str, str, str]:
    """The run's proxy function and queue names: everything the SDK's stack creates is named after the stack
    (explicit names start with it; CloudFormation-generated ones are <stack>-<LogicalId>-<random>)."""
    stack = f"{run_stack_base('mtrl', run_id)}-{SDK_STACK_SUFFIX}"
    return f"{stack}-SageMaker-proxy", f"{stack}-RolloutRequestQueue-1A2B3C", f"{stack}-RolloutResponseQueue-4D5E6F"


def run_worker_role(app_model: AppModel, run_id: str) -> tuple[RolePolicies, RolePolicies]:
    """The run's own worker role as the adapter creates it (mtrl/backends/hyperpod/worker_role.py): its identity
    policies (the deploy-time base policy, the run policy the adapter writes) and its permissions boundary; a call is
    allowed only when both allow it (IAM User Guide, "Policy evaluation logic": permissions boundaries)."""
    settings = HyperPodSettings.model_construct(
        prefix="mtrl",
        region=app_model.region,
        ecs_cluster_arn=f"arn:aws:ecs:{app_model.region}:{app_model.account}:cluster/mtrl-reward-workers",
    )
    base = app_model.find("RewardWorkers/WorkerBasePolicy", type_="AWS::IAM::ManagedPolicy")
    boundary = app_model.find("RewardWorkers/RunWorkerBoundary", type_="AWS::IAM::ManagedPolicy")
    arn = f"arn:aws:iam::{app_model.account}:role/{worker_role_name('mtrl', run_id)}"
    identity = [
        *statements_of(app_model.resolve(base.stack, base.properties["PolicyDocument"]), "WorkerBasePolicy"),
        *statements_of(run_policy_document(settings, run_id), "the run policy"),
    ]
    limits = statements_of(
        app_model.resolve(boundary.stack, boundary.properties["PolicyDocument"]), "RunWorkerBoundary"
    )
    name = worker_role_name("mtrl", run_id)
    return (
        RolePolicies(name=name, arn=arn, path="/", statements=tuple(identity), aws_managed=()),
        RolePolicies(name=f"{name} boundary", arn=arn, path="/", statements=tuple(limits), aws_managed=()),
    )


def test_the_worker_role_allows_what_the_worker_does(
    app_model: AppModel, function_url: tuple[FunctionUrl, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy, requests_name, results_name = run_names(RUN_ID)
    state, url = function_url
    with model_account_aws(monkeypatch, app_model), CallRecorder() as recorder:
        sqs = boto3.client("sqs", region_name="us-east-1")
        requests_url = sqs.create_queue(QueueName=requests_name)["QueueUrl"]
        results_url = sqs.create_queue(QueueName=results_name)["QueueUrl"]
        for rollout in ("r1", "r2"):
            sqs.send_message(QueueUrl=requests_url, MessageBody=json.dumps({"id": rollout, "metadata": {"a": "crane"}}))
        recorder.calls.clear()  # the set-up above is the SDK's doing, not the worker's
        source, sink = SqsRolloutSource(sqs, requests_url), SqsResultSink(sqs, results_url)
        request, other = source.receive(2, 0)
        HttpChatPolicy(url, signer=SigV4Signer(task_role_credentials, "us-east-1")).act(MESSAGES, timeout_s=5)
        sink.publish(RolloutOutcome(request.rollout_id, request.group_id, "completed", 1.0, None))
        source.ack(request)
        source.release(other)  # what shutdown does with an abandoned episode
    assert state.seen[-1][1] == 200
    calls = [*recorder.calls, function_url_call("https://abc123.lambda-url.us-east-1.on.aws/", proxy)]
    assert [str(c) for c in calls] == [
        "sqs.ReceiveMessage",
        "sqs.SendMessage",
        "sqs.DeleteMessage",
        "sqs.ChangeMessageVisibility",
        "lambda.InvokeFunctionUrl",
    ]
    role, boundary = run_worker_role(app_model, RUN_ID)
    decisions = assert_calls_allowed(calls, role, model=app_model)
    assert_calls_allowed(calls, boundary, model=app_model)
    by_action = {d.request.action: d.statement for d in decisions if d.request}
    assert by_action["lambda:InvokeFunctionUrl"].endswith("/CallThisRunsProxyUrl")
    assert by_action["lambda:InvokeFunction"].endswith("/CallThisRunsProxyThroughItsUrl")
    assert by_action["sqs:ReceiveMessage"].endswith("/UseThisRunsQueues")
    # The shared task role reaches none of it any more (issue 20 item 6).
    shared = explain_calls(calls, WORKER_ROLE, model=app_model)
    assert not [d.line() for d in shared if d.ok and d.request and not d.request.action.startswith("kms:")]


def test_a_runs_worker_role_reaches_no_other_runs_queues_or_proxy(app_model: AppModel) -> None:
    # Issue 20 item 6: the worker role could invoke every run's reward proxy (<stem>-nf*).
    proxy, requests_name, _ = run_names("another-run-20261201-xyz")
    others = [
        function_url_call("https://abc123.lambda-url.us-east-1.on.aws/", proxy),
        AwsCall(
            "sqs",
            "ReceiveMessage",
            {"QueueUrl": f"https://sqs.us-east-1.amazonaws.com/{app_model.account}/{requests_name}"},
            "us-east-1",
        ),
    ]
    role, _ = run_worker_role(app_model, RUN_ID)
    assert [d.line() for d in explain_calls(others, role, model=app_model) if d.ok] == []


def test_the_worker_role_reaches_no_other_function(app_model: AppModel) -> None:
    others = [
        function_url_call("https://abc123.lambda-url.us-east-1.on.aws/", "mtrl-agent-wordle"),
        # A proxy URL left with AuthType NONE is not what the grant is for.
        function_url_call("https://abc123.lambda-url.us-east-1.on.aws/", run_names("r")[0], auth_type="NONE"),
        AwsCall("lambda", "Invoke", {"FunctionName": run_names("r")[0]}, "us-east-1"),
    ]
    assert [d.line() for d in explain_calls(others, WORKER_ROLE, model=app_model) if d.ok] == []
    own = [
        function_url_call("https://abc123.lambda-url.us-east-1.on.aws/", "mtrl-agent-wordle"),
        function_url_call("https://abc123.lambda-url.us-east-1.on.aws/", run_names(RUN_ID)[0], auth_type="NONE"),
        AwsCall("lambda", "Invoke", {"FunctionName": run_names(RUN_ID)[0]}, "us-east-1"),
    ]
    role, _ = run_worker_role(app_model, RUN_ID)
    allowed = [d.line() for d in explain_calls(own, role, model=app_model) if d.ok]
    assert allowed == [
        # Only the InvokeFunction half of the NONE-auth URL call: it still needs lambda:InvokeFunctionUrl, denied.
        f"lambda.InvokeFunctionUrl → lambda:InvokeFunction on arn:aws:lambda:us-east-1:111122223333:function:"
        f"{run_names(RUN_ID)[0]}: allowed by the run policy/CallThisRunsProxyThroughItsUrl"
    ]
