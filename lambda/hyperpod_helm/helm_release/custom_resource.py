"""The CloudFormation custom-resource protocol around ``release.apply``: the function is the custom resource's service
token itself (no provider framework), so it answers CloudFormation exactly once, from ``handler``, also on every
failure path and before its own timeout (``lambda/hyperpod_helm/handler.py`` is the function's entry point).
"""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Mapping
from typing import Any

from helm_release.release import apply

LOGGER = logging.getLogger()
LOGGER.setLevel(logging.INFO)


def send_response(
    event: Mapping[str, Any], status: str, physical_id: str, data: Mapping[str, str], reason: str
) -> None:
    body = json.dumps(
        {
            "Status": status,
            "Reason": reason[:3500],
            "PhysicalResourceId": physical_id,
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
            "Data": dict(data),
        }
    ).encode()
    url = event["ResponseURL"]
    if not url.startswith("https://"):
        raise ValueError("ResponseURL must be https")
    request = urllib.request.Request(  # noqa: S310 - CloudFormation's presigned https URL
        url, data=body, method="PUT", headers={"Content-Type": "", "Content-Length": str(len(body))}
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - checked above
        LOGGER.info("CloudFormation response: %s %s", status, response.status)


def handler(event: dict[str, Any], context: Any) -> None:
    LOGGER.info("%s %s (stack %s)", event.get("RequestType"), event.get("LogicalResourceId"), event.get("StackId"))
    fallback_id = event.get("PhysicalResourceId") or f"{event.get('LogicalResourceId', 'helm')}-failed"
    try:
        physical_id, data = apply(event, lambda: context.get_remaining_time_in_millis() / 1000)
    except Exception as error:  # every failure must reach CloudFormation, or the stack waits an hour
        LOGGER.exception("helm custom resource failed")
        send_response(event, "FAILED", fallback_id, {}, f"{type(error).__name__}: {error}")
        return
    send_response(event, "SUCCESS", physical_id, data, "ok")
