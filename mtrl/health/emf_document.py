"""CloudWatch embedded metric format (EMF): the one document shape and line writer behind every metric line of mtrl.

A document names its namespace, its dimensions (every dimension key as one dimension set) and its metrics, each with
a unit; CloudWatch Logs turns such a line into metrics. ``mtrl.health.evaluation``, ``mtrl.health.signal_health`` and
``mtrl.health.emf`` build their documents here.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TextIO

# (metric name, value, unit): the unit is CloudWatch's ("None", "Count", ...)
Metric = tuple[str, float | int | None, str]


def document(
    *,
    namespace: str,
    dimensions: Mapping[str, str],
    metrics: Sequence[Metric],
    timestamp_ms: int | None = None,
) -> dict[str, Any]:
    """One EMF document: the dimension values, then the metric values, at ``timestamp_ms`` (default: now)."""
    return {
        "_aws": {
            "Timestamp": int(time.time() * 1000) if timestamp_ms is None else timestamp_ms,
            "CloudWatchMetrics": [
                {
                    "Namespace": namespace,
                    "Dimensions": [list(dimensions)],
                    "Metrics": [{"Name": name, "Unit": unit} for name, _, unit in metrics],
                }
            ],
        },
        **dict(dimensions),
        **{name: value for name, value, _ in metrics},
    }


def write(documents: Iterable[Mapping[str, Any]], stream: TextIO | None = None) -> int:
    """Write documents as compact JSON lines (stdout by default, which Lambda and ECS ship to CloudWatch Logs)."""
    out = stream or sys.stdout
    written = 0
    for item in documents:
        out.write(json.dumps(item, separators=(",", ":")) + "\n")
        written += 1
    out.flush()
    return written
