"""The RayJob's own entrypoint on a two-node stand-in of the cluster (issue 35, "What to build" 1).

``mtrl render`` makes the run's ConfigMap and RayJob (default settings, the operator's model copy in S3); a real Ray
cluster (``tests/contract/verl_cluster.py``: ray 2.60.0 from ``.venv-verl``, a head with no GPU and a worker with one
logical GPU, each in a private mount namespace) runs ``spec.entrypoint`` as KubeRay's submitter does (``ray job
submit``), with the ConfigMap's ``run.json`` mounted on the head at ``/etc/mtrl``, against S3 (the emulator) for
wordle, ask_to_code and sop_support. The only thing the nodes share is S3.

What this proves, per run: the entrypoint converts the dataset and publishes it with the agent-loop registry under the
run's prefix; every node, the GPU worker included, fetches them and the verified model copy from S3 itself
(``mtrl.backends.verl.train.stage_node``: a node can see no other's disk); verl 0.9.1's ``main_ppo`` starts the
RayPPOTrainer path (``trainer.use_v1=False``; its V1 path would stop at ``import transfer_queue``,
verl/trainer/main_ppo.py) and builds its trainer from the run's overrides.

Where it stops, and why (asserted exactly, so anything breaking earlier fails): see ``CPU_STOP``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from mtrl.cli import app as cli
from tests.contract.verl_cluster import ROOT, VERL_BIN, Cluster, can_isolate, running_cluster

BUCKET = "mtrl-standin-data"
MODEL_PREFIX = "models/tiny-qwen2/"
MODEL_ID = "mtrl/tiny-qwen2"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/verl-trainer@sha256:" + "c" * 64
ENVIRONMENTS = ("wordle", "ask_to_code", "sop_support")
RUN_STAMP = "20261201T120000Z-0a1b2c3d"
JOB_TIMEOUT_S = 300
# Where verl 0.9.1 stops on a machine without CUDA: verl.trainer.main_ppo.main composes the run's config, then
# validate_config (verl/utils/config.py) imports the rollout engine the run names (rollout.name=vllm:
# verl/workers/rollout/vllm_rollout/__init__.py -> verl/third_party/vllm/__init__.py), and vLLM is a CUDA-only package
# (the image has it; .venv-verl, CPU torch, cannot). verl has no CPU rollout server for its async agent-loop mode
# (verl/workers/rollout/replica.py registers vllm, sglang and trtllm only), so the TaskRunner, the trainer's
# construction and MtrlAgentLoop on the worker are not reached here.
CPU_STOP = "ValueError: vllm version None not supported and SGLang also not Found"
STOP_FRAMES = ("verl/trainer/main_ppo.py", "verl/utils/config.py", "verl/third_party/vllm/__init__.py")


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI never skips the contract tier")
    pytest.skip(reason)


def _tiny_model(into: Path) -> None:
    """The device check's tiny Qwen2 (random weights, byte-level tokenizer), built with .venv-verl's torch."""
    script = "import sys; from pathlib import Path; from benchmarks.device.verl_two_steps import build_model; "
    script += "build_model(Path(sys.argv[1]))"
    subprocess.run(
        [str(VERL_BIN / "python"), "-c", script, str(into)],
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        timeout=300,
    )


def _publish_model(s3: Any, model_dir: Path) -> str:
    """The operator's copy of the model and its SHA256SUMS; the SHA-256 the deployment pins."""
    sums = ""
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        name = path.relative_to(model_dir).as_posix()
        s3.upload_file(str(path), BUCKET, MODEL_PREFIX + name)
        sums += f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {name}\n"
    s3.put_object(Bucket=BUCKET, Key=MODEL_PREFIX + "SHA256SUMS", Body=sums.encode())
    return hashlib.sha256(sums.encode()).hexdigest()


def _render(tmp_path: Path, env_id: str, run_id: str, sha256: str) -> list[dict[str, Any]]:
    """``mtrl render --json`` of a default run of ``env_id`` with the deployment's model copy in the stand-in bucket."""
    manifest = tmp_path / f"{env_id}.run.json"
    manifest.write_text(json.dumps({"environment": env_id}))
    model = {"id": MODEL_ID, "s3_uri": f"s3://{BUCKET}/{MODEL_PREFIX}", "sha256": sha256}
    arguments = ["render", "--manifest", str(manifest), "--cdk-json", str(ROOT / "cdk.json"), "--json"]
    arguments += ["--run-id", run_id, "--data-bucket", BUCKET]
    arguments += ["-c", "verl_models=" + json.dumps([model]), "-c", f"verl_image_uri={IMAGE}"]
    result = CliRunner().invoke(cli, arguments)
    assert result.exit_code == 0, result.output
    objects: list[dict[str, Any]] = json.loads(result.stdout)
    return objects


def _container_env(rayjob: dict[str, Any]) -> dict[str, str]:
    container = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    return {item["name"]: item["value"] for item in container["env"]}


def _keys(s3: Any, prefix: str) -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Every run's job output, the worker's node id and the S3 objects each run left (one cluster for the three)."""
    if not (VERL_BIN / "python").exists():
        _skip_or_fail(".venv-verl is missing (make verl)")
    if not can_isolate():
        _skip_or_fail("private mount namespaces need root (unshare --mount)")
    from mtrl.emulator import Emulator, find_emulator

    if find_emulator() is None:
        _skip_or_fail(".venv-emulator is missing (make emulator)")
    tmp_path = tmp_path_factory.mktemp("verl-standin")
    model_dir = tmp_path / "model"
    _tiny_model(model_dir)
    config_dir = tmp_path / "configmap"
    config_dir.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    with Emulator() as emulator:
        s3 = boto3.client("s3", **emulator.client_kwargs)
        s3.create_bucket(Bucket=BUCKET)
        sha256 = _publish_model(s3, model_dir)
        rendered = {
            env_id: _render(tmp_path, env_id, f"{env_id.replace('_', '-')}-{RUN_STAMP}", sha256)
            for env_id in ENVIRONMENTS
        }
        pod_env = _container_env(rendered["wordle"][1])
        credentials = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}
        environment = {
            **pod_env,
            **credentials,
            "AWS_ENDPOINT_URL_S3": emulator.endpoint_url,
            "PYTHONPATH": str(ROOT),
        }
        cluster = Cluster(environment=environment, logs=logs, config_dir=config_dir)
        results: dict[str, Any] = {}
        with running_cluster(cluster):
            nodes = cluster.alive_nodes()
            results["nodes"] = {
                "head": [n["node_id"] for n in nodes if n.get("is_head_node")],
                "worker": [n["node_id"] for n in nodes if not n.get("is_head_node")],
            }
            for env_id, (config_map, rayjob) in rendered.items():
                run_id = rayjob["metadata"]["annotations"]["mtrl/run-id"]
                dataset = (ROOT / "environments" / env_id / "sample" / "train.jsonl").read_bytes()
                s3.put_object(Bucket=BUCKET, Key=f"training-data/{env_id}.jsonl", Body=dataset)
                (config_dir / "run.json").write_text(config_map["data"]["run.json"])
                job = cluster.submit(rayjob["spec"]["entrypoint"], timeout_s=JOB_TIMEOUT_S)
                results[env_id] = {
                    "job": job,
                    "run_id": run_id,
                    "objects": _keys(s3, f"runs/{run_id}/"),
                    "entrypoint": rayjob["spec"]["entrypoint"],
                }
        yield results


@pytest.mark.parametrize("env_id", ENVIRONMENTS)
def test_the_rayjobs_entrypoint_runs_on_the_stand_in(env_id: str, standin: dict[str, Any]) -> None:
    found = standin[env_id]
    job: subprocess.CompletedProcess[str] = found["job"]
    output = job.stdout + job.stderr
    assert found["entrypoint"] == "python -m mtrl.backends.verl.train --run-config /etc/mtrl/run.json"
    # The inputs every node fetches, under the run's own prefix.
    inputs = f"runs/{found['run_id']}/verl-inputs/"
    assert {inputs + "data/train.parquet", inputs + "agent_loops.yaml"} <= set(found["objects"]), output[-5000:]
    # verl's entry point ran with the run's overrides, and stopped exactly where a CPU machine must.
    assert "'trainer.use_v1=false'" in output, output[-5000:]
    assert CPU_STOP in output, output[-5000:]
    assert all(frame in output for frame in STOP_FRAMES), output[-5000:]
    assert "transfer_queue" not in output


@pytest.mark.parametrize("env_id", ENVIRONMENTS)
def test_every_node_fetches_the_inputs_and_the_model_from_s3_itself(env_id: str, standin: dict[str, Any]) -> None:
    """The head and the GPU worker each staged the run from S3 (neither can see the other's disk)."""
    output = standin[env_id]["job"].stdout
    staged = set(re.findall(r"inputs and model staged from S3 on node ([0-9a-f]+)", output))
    assert staged == {*standin["nodes"]["head"], *standin["nodes"]["worker"]}, output[-5000:]
    assert len(standin["nodes"]["worker"]) == 1
