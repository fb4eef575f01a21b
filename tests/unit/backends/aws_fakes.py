"""Test doubles for the backend adapters: moto for what it implements, and model-validated fakes for what it does not.

moto 5.2.5 has no SageMaker ``CreateJob``/``DescribeJob``/``StopJob``/``UpdateCluster``/``ListClusterEvents`` and
cannot run a Lambda or an AgentCore runtime. ``FakeAws`` answers those operations from Python handlers, hooked on
botocore's ``before-call`` event: by then botocore has already validated the request against the service model
(a wrong field name or type fails the test), and every fake response is validated against the operation's output
shape, as ``botocore.stub.Stubber`` does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse
from botocore.validate import ParamValidator

from mtrl.backends.base import CreatedResource

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account


class FakeError(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


Handler = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass
class FakeAws:
    session: boto3.Session
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def on(self, service: str, operation: str, handler: Handler) -> None:
        model = self.session._session.get_service_model(service)
        output_shape = model.operation_model(operation).output_shape

        def hook(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
            body = params.get("body") or b"{}"
            decoded = json.loads(body) if model.protocol in {"json", "rest-json"} and body[:1] == b"{" else {}
            decoded.update({"__uri__": params.get("url_path", ""), "__headers__": dict(params.get("headers", {}))})
            self.calls.append((operation, decoded))
            try:
                result = handler(decoded)
            except FakeError as error:
                return AWSResponse("", error.status, {}, None), {
                    "Error": {"Code": error.code, "Message": error.message},
                    "ResponseMetadata": {"HTTPStatusCode": error.status},
                }
            if output_shape is not None:
                report = ParamValidator().validate(result, output_shape)
                assert not report.has_errors(), f"fake {operation} response is invalid: {report.generate_report()}"
            return AWSResponse("", 200, {}, None), {**result, "ResponseMetadata": {"HTTPStatusCode": 200}}

        self.session.events.register(f"before-call.{model.service_id.hyphenize()}.{operation}", hook)

    def called(self, operation: str) -> list[dict[str, Any]]:
        return [params for name, params in self.calls if name == operation]


@dataclass
class Recorder:
    """Stands in for the run registry: what the adapter recorded, in order."""

    resources: list[CreatedResource] = field(default_factory=list)

    def __call__(self, resource: CreatedResource) -> None:
        self.resources.append(resource)
