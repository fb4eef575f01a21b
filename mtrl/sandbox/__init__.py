"""Run untrusted generated code with no credentials, no network, resource limits and forgery-proof results."""

from mtrl.sandbox.runner import Limits, SandboxResult, SandboxUnavailableError, count_tests, run_code, test_names

__all__ = ["Limits", "SandboxResult", "SandboxUnavailableError", "count_tests", "run_code", "test_names"]
