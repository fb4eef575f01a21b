"""Verifiable execution as a block: generated code run in ``mtrl.sandbox``, one result per content per episode.

The SageMaker AI multi-turn RL best-practices post: for code, SQL or maths the reward runs the output in an isolated
sandbox, and the same input in the same sandbox state must give the same result. ``Execution`` wraps
``mtrl.sandbox.run_cases`` (same isolation, same trusted judge outside the sandbox, same ``Limits``) and caches each
result under the SHA-256 of everything that decides it: the program, every check (function, arguments, expected value),
the case names and the limits. The episode's state enters as check arguments (for example ``EpisodeState.rows(...)``),
so "same code + same state and input" is literally "same key": within an episode the second run returns the first result
— a wall-clock timeout on a busy host cannot turn a pass into a fail on re-scoring.

Use one ``Execution`` per episode (create it in ``reset``); the cache holds copies, never shared objects.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from mtrl.sandbox import Case, Limits, Raises, SandboxResult, run_cases
from mtrl.sandbox.judge import encode


def _expected(value: Any) -> Any:
    if isinstance(value, Raises):
        return {"raises": value.error}
    return encode(value)


def content_key(program: str, cases: Sequence[Case], limits: Limits) -> str:
    """SHA-256 of the program, the cases (names, calls, arguments, expected values) and the limits."""
    document = {
        "program": program,
        "cases": [
            {
                "name": case.name,
                "checks": [
                    {"call": check.call, "args": encode(list(check.args)), "expect": _expected(check.expect)}
                    for check in case.checks
                ],
            }
            for case in cases
        ],
        "limits": asdict(limits),
    }
    text = json.dumps(document, sort_keys=True, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Execution:
    """Runs programs on hidden cases in the sandbox; a repeated (program, cases, limits) returns the cached result."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.runs = 0  # sandbox executions actually started
        self.cache_hits = 0
        self._results: dict[str, SandboxResult] = {}

    def run_cases(self, program: str, cases: Sequence[Case]) -> SandboxResult:
        """``mtrl.sandbox.run_cases(program, cases, limits)``, at most once per distinct content."""
        key = content_key(program, cases, self.limits)
        cached = self._results.get(key)
        if cached is not None:
            self.cache_hits += 1
            return copy.deepcopy(cached)
        result = run_cases(program, list(cases), self.limits)
        self.runs += 1
        self._results[key] = copy.deepcopy(result)
        return result
