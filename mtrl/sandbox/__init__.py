"""Run untrusted generated code with no credentials, no network and resource limits; judge it outside."""

from mtrl.sandbox.judge import Case, Check, Raises
from mtrl.sandbox.runner import (
    Limits,
    SandboxResult,
    SandboxUnavailableError,
    count_tests,
    run_cases,
    run_code,
    test_names,
)

__all__ = [
    "Case",
    "Check",
    "Limits",
    "Raises",
    "SandboxResult",
    "SandboxUnavailableError",
    "count_tests",
    "run_cases",
    "run_code",
    "test_names",
]
