"""What the Helm installer Lambda runs: its staged code asset (``stage_function_code("hyperpod_helm")``: the handler,
its ``helm_release`` package and the shared ``mtrl`` package) on the Python 3.14 runtime with the kubectl layer and
no dependency layer, so its handler must import with nothing but the staged code, the standard library and the
runtime's boto3. A fresh interpreter imports it with the staged folder first on the path, as Lambda's /var/task is."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from stacks.constructs.python_function import stage_function_code

PROBE = r"""
import json, sys
code = sys.argv[1]
sys.path.insert(0, code)
started = set(sys.modules)  # what the interpreter loaded before the handler (site hooks)
import handler
import helm_release.run_guard
import mtrl.runs.slots
# Installed packages (not the standard library, not the staged code) the import pulled in.
outside = sorted(
    {
        name.split(".")[0]
        for name, module in list(sys.modules.items())
        if name not in started
        and not str(getattr(module, "__file__", None) or "").startswith(code)
        and any(part in str(getattr(module, "__file__", None) or "") for part in ("site-packages", "dist-packages"))
    }
)
print(json.dumps({
    "handler": handler.__file__,
    "entry": handler.handler.__module__,
    "apply": sys.modules["helm_release.custom_resource"].apply.__module__,
    "release": sys.modules["helm_release.release"].__file__,
    "mtrl": sys.modules["mtrl"].__file__,
    "one_slot_reader": helm_release.run_guard.live_holders is mtrl.runs.slots.live_holders,
    "outside": outside,
}))
"""
# The runtime's boto3 and what it imports (certifi: botocore's optional CA bundle).
RUNTIME_PACKAGES = {"boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six", "certifi"}


def test_the_staged_installer_imports_with_only_its_code_and_the_runtimes_boto3() -> None:
    code = stage_function_code("hyperpod_helm")
    assert (code / "helm_release" / "release.py").is_file()
    assert (code / "mtrl" / "runs" / "slots.py").is_file()
    env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1"}
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(code)], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    for key in ("handler", "release", "mtrl"):
        assert str(found[key]).startswith(str(code)), (key, found[key])  # the staged copy, not the checkout's
    assert found["entry"] == "helm_release.custom_resource"
    assert found["apply"] == "helm_release.release"
    assert found["one_slot_reader"]  # the slot table is read by mtrl.runs.slots, not a copy of its schema
    assert set(found["outside"]) <= RUNTIME_PACKAGES, found["outside"]  # no pydantic, Powertools, yaml…
