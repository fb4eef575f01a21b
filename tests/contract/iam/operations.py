"""The table of botocore operations the IAM contract knows (``OPERATIONS``), what a call and its environment are,
and how an entry is registered; the entries themselves are in requests.py and requests_compute.py."""

from __future__ import annotations

import datetime as _dt
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.contract.iam.model import AppModel
from tests.contract.iam.policy import IamRequest


@dataclass(frozen=True)
class AwsCall:
    """One AWS API call as a client made it (JSON-serialisable). ``context`` adds condition keys the call carries
    that its parameters do not show (e.g. ``aws:SourceVpc``)."""

    service: str
    operation: str
    params: Mapping[str, Any]
    region: str
    context: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> AwsCall:
        missing = [k for k in ("service", "operation", "region") if not record.get(k)]
        if missing:
            raise ValueError(f"call record lacks {missing}: {dict(record)}")
        return cls(
            service=str(record["service"]),
            operation=str(record["operation"]),
            params=dict(record.get("params") or {}),
            region=str(record["region"]),
            context=dict(record.get("context") or {}),
        )

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "service": self.service,
            "operation": self.operation,
            "params": jsonable(self.params),
            "region": self.region,
        }
        if self.context:
            record["context"] = dict(self.context)
        return record

    def __str__(self) -> str:
        return f"{self.service}.{self.operation}"


def jsonable(value: Any) -> Any:
    """Parameters as JSON: bytes and streams become a size marker, datetimes ISO strings."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return {"__bytes__": len(value), "sha256": hashlib.sha256(value).hexdigest()}
    if isinstance(value, _dt.datetime | _dt.date):
        return value.isoformat()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return f"<{type(value).__name__}>"


class NoMapping(LookupError):
    pass


@dataclass
class Env:
    """What building ARNs needs beyond the parameters: the account, and the app model for ids the parameters do not
    carry (a HyperPod cluster's id, a task definition's roles, a bucket's KMS key)."""

    account: str
    model: AppModel | None = None
    partition: str = "aws"
    registered_task_roles: dict[str, list[str]] = field(default_factory=dict)  # family → roles, from the calls

    @classmethod
    def of(cls, model: AppModel | None, calls: Sequence[AwsCall] = (), account: str | None = None) -> Env:
        env = cls(account=account or (model.account if model else "111122223333"), model=model)
        for call in calls:
            if (call.service, call.operation) == ("ecs", "RegisterTaskDefinition"):
                roles = [str(call.params[k]) for k in ("taskRoleArn", "executionRoleArn") if call.params.get(k)]
                env.registered_task_roles[str(call.params["family"])] = roles
        return env

    def arn(self, service: str, resource: str, region: str, *, account: bool = True) -> str:
        return f"arn:{self.partition}:{service}:{region}:{self.account if account else ''}:{resource}"


Builder = Callable[[AwsCall, Env], list[IamRequest]]


@dataclass(frozen=True)
class Operation:
    service: str
    operation: str
    build: Builder
    example: Mapping[str, Any]
    api: bool = True  # False: not a botocore operation (a function-URL invocation)


OPERATIONS: dict[tuple[str, str], Operation] = {}


def register(
    service: str, operation: str, example: Mapping[str, Any], *, api: bool = True
) -> Callable[[Builder], Builder]:
    def decorate(build: Builder) -> Builder:
        OPERATIONS[(service, operation)] = Operation(service, operation, build, example, api)
        return build

    return decorate


def simple(
    service: str,
    operation: str,
    resource: Callable[[Mapping[str, Any], Env, str], str | list[str]],
    example: Mapping[str, Any],
    *,
    action: str | None = None,
    context: Callable[[Mapping[str, Any], Env, str], Mapping[str, Any]] | None = None,
) -> None:
    prefix = IAM_PREFIX[service]

    def build(call: AwsCall, env: Env) -> list[IamRequest]:
        arns = resource(call.params, env, call.region)
        keys = dict(context(call.params, env, call.region)) if context else {}
        return [
            IamRequest(action or f"{prefix}:{operation}", arn, keys)
            for arn in ([arns] if isinstance(arns, str) else arns)
        ]

    OPERATIONS[(service, operation)] = Operation(service, operation, build, example)


IAM_PREFIX = {
    "s3": "s3",
    "sts": "sts",
    "ecs": "ecs",
    "sagemaker": "sagemaker",
    "cloudformation": "cloudformation",
    "lambda": "lambda",
    "sqs": "sqs",
    "iam": "iam",
    "eks": "eks",
    "ecr": "ecr",
    "logs": "logs",
    "ec2": "ec2",
    "kms": "kms",
    "dynamodb": "dynamodb",
    "cloudwatch": "cloudwatch",
    "sns": "sns",
    "ssm": "ssm",
}


def pass_role(role_arns: Sequence[str], service: str, note: str) -> list[IamRequest]:
    return [IamRequest("iam:PassRole", arn, {"iam:PassedToService": service}, note) for arn in role_arns]
