"""The deployed agent package can create a ``sagemakerjobruntime`` client (defect 2).

What Lambda runs: the staged code asset (``stage_function_code("serverless_agent")``) with the dependency layer
(``.build/lambda-deps``, built by ``make setup``) on the path before the runtime's own boto3. A fresh interpreter is
started with exactly that order (layer's ``python/`` first, then the code), so the botocore it imports is the layer's,
and the handler's runtime (``mtrl.worker.serverless_agent``, staged with it) must build a job-runtime client with it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from stacks.constructs.python_function import LAYER_DIR, stage_function_code
from tests.aws_fixtures import fake_credentials

PROBE = r"""
import json, sys
layer, code = sys.argv[1], sys.argv[2]
sys.path[:0] = [layer, code]
import botocore, boto3
import handler
from mtrl.worker.serverless_agent import job_runtime_client
assert handler.handler.__module__ == "mtrl.worker.serverless_agent"
client = job_runtime_client("us-east-1")
print(json.dumps({
    "botocore": botocore.__file__,
    "boto3": boto3.__file__,
    "version": botocore.__version__,
    "service": client.meta.service_model.service_name,
    "operations": sorted(client.meta.service_model.operation_names),
}))
"""


def _probe(layer: Path, code: Path) -> dict[str, object]:
    env = {**os.environ, **fake_credentials()}
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(layer), str(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def test_the_agent_package_creates_a_job_runtime_client_from_the_layers_botocore() -> None:
    layer = LAYER_DIR / "python"
    assert (layer / "botocore" / "data" / "sagemakerjobruntime").is_dir(), "make setup builds the layer"
    code = stage_function_code("serverless_agent")
    assert not (code / "botocore").exists()  # the SDK comes from the layer, never bundled or from the runtime
    found = _probe(layer, code)
    assert str(found["botocore"]).startswith(str(layer))
    assert str(found["boto3"]).startswith(str(layer))
    assert found["service"] == "sagemakerjobruntime"
    assert {"Sample", "CompleteRollout", "UpdateReward"} <= set(found["operations"])  # type: ignore[arg-type]
    # botocore >= 1.43.37 is the first with the AgentRFT CreateJob and the job runtime (reference A.1).
    major, minor, patch = (int(part) for part in str(found["version"]).split(".")[:3])
    assert (major, minor, patch) >= (1, 43, 37)
