"""Transports for the worker runtime: SQS request/result queues and an OpenAI-compatible policy client.

Request message body (JSON): ``{"rollout_id": str, "group_id"?: str, "task": {...}}`` or a dataset row
``{"id": str, "metadata": {...}}``. Without ``group_id`` the group is the task itself (rollouts of the same
task share a group). Results are published as ``RolloutOutcome.to_message()`` JSON.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from mtrl.worker.runtime import RolloutOutcome, RolloutRequest

MAX_RESULT_BYTES = 200 * 1024  # SQS allows 256 KiB per message; keep headroom for attributes


class MalformedRequestError(ValueError):
    pass


def parse_request(body: str, receipt: Any = None) -> RolloutRequest:
    try:
        document = json.loads(body)
    except json.JSONDecodeError as error:
        raise MalformedRequestError(f"request is not JSON: {error.msg}") from None
    if not isinstance(document, Mapping):
        raise MalformedRequestError("request must be a JSON object")
    rollout_id = document.get("rollout_id") or document.get("id")
    task = document.get("task") if "task" in document else document.get("metadata")
    if not isinstance(rollout_id, str) or not rollout_id:
        raise MalformedRequestError("request needs a non-empty 'rollout_id' (or 'id')")
    if not isinstance(task, Mapping):
        raise MalformedRequestError("request needs a 'task' (or 'metadata') object")
    group = document.get("group_id")
    if not isinstance(group, str) or not group:
        group = hashlib.sha256(json.dumps(task, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return RolloutRequest(rollout_id=rollout_id, group_id=group, task=dict(task), receipt=receipt)


class SqsRolloutSource:
    """Long-polls the request queue; a request is deleted only after its result is published."""

    def __init__(self, client: Any, queue_url: str) -> None:
        self.client = client
        self.queue_url = queue_url
        self.malformed = 0

    def receive(self, max_count: int, wait_s: float) -> list[RolloutRequest]:
        response = self.client.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=max(1, min(10, max_count)), WaitTimeSeconds=int(wait_s)
        )
        requests = []
        for message in response.get("Messages", []):
            try:
                requests.append(parse_request(message["Body"], message["ReceiptHandle"]))
            except MalformedRequestError:
                # Leave it to the queue's redrive policy (dead-letter queue) rather than losing it silently.
                self.malformed += 1
        return requests

    def ack(self, request: RolloutRequest) -> None:
        self.client.delete_message(QueueUrl=self.queue_url, ReceiptHandle=request.receipt)

    def release(self, request: RolloutRequest) -> None:
        self.client.change_message_visibility(
            QueueUrl=self.queue_url, ReceiptHandle=request.receipt, VisibilityTimeout=0
        )


class SqsResultSink:
    def __init__(self, client: Any, queue_url: str) -> None:
        self.client = client
        self.queue_url = queue_url

    def publish(self, outcome: RolloutOutcome) -> None:
        self.client.send_message(QueueUrl=self.queue_url, MessageBody=result_body(outcome))


def result_body(outcome: RolloutOutcome) -> str:
    """JSON result; the transcript is dropped (never the scores) if the message would be too large."""
    message = outcome.to_message()
    body = json.dumps(message, separators=(",", ":"))
    if len(body.encode()) > MAX_RESULT_BYTES:
        message["messages"] = []
        message["transcript_dropped"] = True
        body = json.dumps(message, separators=(",", ":"))
    return body


_FUNCTION_URL_HOST = re.compile(r"^[a-z0-9]+\.lambda-url\.([a-z0-9-]+)\.on\.aws$")


def function_url_region(url: str) -> str | None:
    """The region of a Lambda function URL (``https://<id>.lambda-url.<region>.on.aws/…``), None for other URLs."""
    match = _FUNCTION_URL_HOST.match(urllib.parse.urlsplit(url).hostname or "")
    return match.group(1) if match else None


class SigV4Signer:
    """Signs requests for an ``AuthType=AWS_IAM`` Lambda function URL (service ``lambda``) with SigV4.

    ``credentials`` returns botocore credentials (e.g. ``boto3.Session().get_credentials``: the ECS task role's,
    refreshed by botocore before they expire); each request is signed with a fresh frozen copy.
    """

    def __init__(self, credentials: Callable[[], Any], region: str, *, service: str = "lambda") -> None:
        self._credentials = credentials
        self.region = region
        self.service = service

    def sign(self, method: str, url: str, body: bytes, headers: Mapping[str, str]) -> dict[str, str]:
        from botocore.auth import SigV4Auth  # noqa: PLC0415 - only signing workers need botocore
        from botocore.awsrequest import AWSRequest  # noqa: PLC0415

        credentials = self._credentials()
        if credentials is None:
            raise PermissionError("no AWS credentials to sign the policy request with (is the task role set?)")
        frozen = credentials.get_frozen_credentials()
        # Function URLs need the body's hash for POST (Lambda guide, "Invoking Lambda function URLs").
        signed_headers = {**headers, "X-Amz-Content-SHA256": hashlib.sha256(body).hexdigest()}
        request = AWSRequest(method=method, url=url, data=body, headers=signed_headers)
        SigV4Auth(frozen, self.service, self.region).add_auth(request)
        return dict(request.headers.items())


class HttpChatPolicy:
    """An OpenAI-compatible ``/chat/completions`` endpoint (e.g. a model server or a proxy); with ``signer`` every
    request is SigV4-signed (the Nova Forge proxy's function URL requires it)."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str = "default",
        headers: Mapping[str, str] | None = None,
        signer: SigV4Signer | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"policy URL must be http(s): {base_url!r}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.headers = {"Content-Type": "application/json", **dict(headers or {})}
        self.signer = signer

    def act(self, messages: list[dict[str, str]], *, timeout_s: float) -> str:
        payload = json.dumps({"model": self.model, "messages": messages}).encode()
        headers = self.signer.sign("POST", self.url, payload, self.headers) if self.signer else dict(self.headers)
        request = urllib.request.Request(self.url, data=payload, headers=headers, method="POST")  # noqa: S310
        with urllib.request.urlopen(request, timeout=max(0.1, timeout_s)) as response:  # noqa: S310 - checked scheme
            document = json.loads(response.read())
        try:
            content = document["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise ValueError("policy response has no choices[0].message.content") from None
        return content if isinstance(content, str) else json.dumps(content)
