"""The RayJob's own entrypoint on a two-node stand-in of the cluster (issue 35, "What to build" 1).

``mtrl render`` makes the run's ConfigMap and RayJob (default settings, the operator's model copy in S3); a real Ray
cluster (``tests/contract/verl_cluster.py``: ray 2.60.0 from ``.venv-verl``, a head with no GPU and a worker with one
logical GPU, each in a private mount namespace) runs ``spec.entrypoint`` as KubeRay's submitter does (``ray job
submit``), with the ConfigMap's ``run.json`` mounted on the head at ``/etc/mtrl``, against S3 (the emulator) for
wordle, ask_to_code and sop_support. The only thing the nodes share is S3.

What this proves, per run: the entrypoint converts the dataset and publishes it with the agent-loop registry under the
run's prefix; every node, the GPU worker included, fetches them and the verified model copy from S3 itself
(``mtrl.backends.verl.train.stage_node``: a node can see no other's disk); the trainer command gets the run's
overrides with ``trainer.use_v1=false`` (verl's V1 path would stop at ``import transfer_queue``,
verl/trainer/main_ppo.py).

The trainer the entrypoint starts is ``tests/contract/verl_cpu_trainer.py`` (through ``MTRL_VERL_TRAINER``, set in the
job's runtime environment; the entrypoint itself is the rendered one): it runs verl 0.9.1's own ``main_ppo.main`` with
those overrides, which stops on this machine where ``validate_config`` imports the vLLM rollout (``CPU_STOP``), then
goes on with verl's own classes: the dataset from the parquet staged on the head, a batch as RayPPOTrainer pops and
repeats it, and ``AgentLoopWorker.generate_sequences`` as a Ray actor on the node with the GPU, which loads the agent
loop from the registry staged on that node and plays ``MtrlAgentLoop`` with a scripted LLM client (vLLM needs CUDA).
The job then fails where it must: verl trained nothing, so there is no checkpoint to export.

Not exercised here (no CUDA, no vLLM): verl's TaskRunner and RayPPOTrainer construction, the FSDP actor and its NCCL
process group, the vLLM replicas, a training step, checkpoints and the export. The device check and a real cluster
remain their proof.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from mtrl.cli import app as cli
from mtrl.runs.phases.inputs import validated_keys
from tests.contract.tier import skip_or_fail
from tests.contract.verl_cluster import ROOT, VERL_BIN, Cluster, can_isolate, running_cluster

BUCKET = "mtrl-standin-data"
MODEL_PREFIX = "models/tiny-qwen2/"
MODEL_ID = "mtrl/tiny-qwen2"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/verl-trainer@sha256:" + "c" * 64
ENVIRONMENTS = ("wordle", "ask_to_code", "sop_support")
RUN_STAMP = "20261201T120000Z-0a1b2c3d"
JOB_TIMEOUT_S = 300
# Where verl 0.9.1's own main_ppo stops on a machine without CUDA: after composing the run's config, validate_config
# (verl/utils/config.py) imports the rollout engine the run names (rollout.name=vllm:
# verl/workers/rollout/vllm_rollout/__init__.py -> verl/third_party/vllm/__init__.py), and vLLM is a CUDA-only package.
# verl has no CPU rollout server for its async agent-loop mode (verl/workers/rollout/replica.py registers vllm, sglang
# and trtllm only).
CPU_STOP = "ValueError: vllm version None not supported and SGLang also not Found"
STOP_FRAMES = ("verl/trainer/main_ppo.py", "verl/utils/config.py", "verl/third_party/vllm/__init__.py")
CPU_TRAINER = f"{VERL_BIN / 'python'} {ROOT / 'tests' / 'contract' / 'verl_cpu_trainer.py'}"
GROUP_SIZE, PROMPT_LENGTH, RESPONSE_LENGTH = 8, 1024, 2048  # the deployment's defaults (mtrl.settings)


# A tiny Qwen2 with random weights and a byte-level BPE tokenizer trained here on the built-in environments' samples
# (2,000 tokens: about as many tokens per prompt as Qwen2.5's tokenizer makes, so default lengths mean what they mean
# on a real model; a byte tokenizer would make sop_support's first prompt four times too long), with a Qwen2.5-like
# chat template. Built in .venv-verl (torch, transformers as locked).
TINY_MODEL = """
import sys
from pathlib import Path
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

root, into = Path(sys.argv[1]), Path(sys.argv[2])
specials = ["<pad>", "<|im_start|>", "<|im_end|>"]
sys.path.insert(0, str(root))
import json
from mtrl.envs.registry import load_spec
texts = []
for path in sorted(root.glob("environments/*/sample/train.jsonl")):  # each environment's prompts, as a model sees them
    spec = load_spec(path.parent.parent.name)
    for line in path.read_text().splitlines()[:20]:
        texts += [spec.system_prompt, str(spec.make().reset(json.loads(line)["metadata"]))]
core = Tokenizer(models.BPE())
core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
core.decoder = decoders.ByteLevel()
alphabet = pre_tokenizers.ByteLevel.alphabet()
trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=specials, initial_alphabet=alphabet)
core.train_from_iterator(texts, trainer)
tokenizer = PreTrainedTokenizerFast(
    tokenizer_object=core, pad_token="<pad>", eos_token="<|im_end|>", additional_special_tokens=["<|im_start|>"]
)
tokenizer.chat_template = (
    "{%- for m in messages %}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
config = Qwen2Config(
    vocab_size=len(tokenizer), bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
    pad_token_id=tokenizer.pad_token_id, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
    num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096, tie_word_embeddings=True,
)
torch.manual_seed(0)
Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(into, safe_serialization=True)
tokenizer.save_pretrained(into)
"""


def _tiny_model(into: Path) -> None:
    subprocess.run(
        [str(VERL_BIN / "python"), "-c", TINY_MODEL, str(ROOT), str(into)], check=True, cwd=ROOT, timeout=300
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
        skip_or_fail(".venv-verl is missing (make verl)")
    if not can_isolate():
        skip_or_fail("private mount namespaces need root (unshare --mount)")
    from mtrl.emulator import Emulator, find_emulator

    if find_emulator() is None:
        skip_or_fail(".venv-emulator is missing (make emulator)")
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
            results["nodes"] = cluster.node_ids()
            for env_id, (config_map, rayjob) in rendered.items():
                run_id = rayjob["metadata"]["annotations"]["mtrl/run-id"]
                dataset = (ROOT / "environments" / env_id / "sample" / "train.jsonl").read_bytes()
                # Where Validate copies the bytes it checked (mtrl.runs.phases.inputs.validated_keys): what the
                # rendered run reads.
                s3.put_object(Bucket=BUCKET, Key=validated_keys(run_id)[0], Body=dataset)
                (config_dir / "run.json").write_text(config_map["data"]["run.json"])
                job = cluster.submit(
                    rayjob["spec"]["entrypoint"], timeout_s=JOB_TIMEOUT_S, env_vars={"MTRL_VERL_TRAINER": CPU_TRAINER}
                )
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
    # verl's own entry point ran with the run's overrides, and stopped exactly where a CPU machine must.
    assert CPU_STOP in output, output[-5000:]
    assert all(frame in output for frame in STOP_FRAMES), output[-5000:]
    assert "verl main_ppo stopped" in output
    assert "transfer_queue" not in output
    # The job fails where it must after the rollout: nothing was trained, so nothing can be exported.
    assert job.returncode != 0
    assert f"run {found['run_id']}: the trainer exited without a checkpoint to export" in output, output[-3000:]


def _rollout(output: str) -> dict[str, Any]:
    found = re.search(r"mtrl cpu rollout: (\{.*\})", output)
    assert found, output[-5000:]
    report: dict[str, Any] = json.loads(found.group(1))
    return report


@pytest.mark.parametrize("env_id", ENVIRONMENTS)
def test_the_first_rollout_goes_through_mtrl_agent_loop_on_the_gpu_worker(env_id: str, standin: dict[str, Any]) -> None:
    """verl's AgentLoopWorker, on the worker, loads MtrlAgentLoop from the registry that node staged from S3 and plays
    a step's batch (2 rows x group_size) at the default lengths; every episode logs the node it ran on."""
    output = standin[env_id]["job"].stdout
    report = _rollout(output)
    (worker,) = standin["nodes"]["worker"]
    assert report["use_v1"] is False
    assert (report["env_id"], report["node"]) == (env_id, worker)
    assert report["samples"] == 2 * GROUP_SIZE
    # verl's batch: every prompt left-padded to max_prompt_length, every response to max_response_length.
    assert report["prompts_shape"] == [2 * GROUP_SIZE, PROMPT_LENGTH]
    assert report["responses_shape"] == [2 * GROUP_SIZE, RESPONSE_LENGTH]
    assert all(-10 < reward < 10 for reward in report["rewards"]), report
    episodes = re.findall(rf"mtrl agent loop: {env_id} episode on node ([0-9a-f]+)", output)
    assert episodes == [worker] * (2 * GROUP_SIZE), output[-3000:]
    # sop_support's first prompt (~1,200 tokens) is longer than the default max_prompt_length: its overflow rides in
    # the response window (environment tokens first); the others fit.
    assert report["overflowed"] == (2 * GROUP_SIZE if env_id == "sop_support" else 0), report


@pytest.mark.parametrize("env_id", ENVIRONMENTS)
def test_every_node_fetches_the_inputs_and_the_model_from_s3_itself(env_id: str, standin: dict[str, Any]) -> None:
    """The head and the GPU worker each staged the run from S3 (neither can see the other's disk)."""
    output = standin[env_id]["job"].stdout
    staged = set(re.findall(r"inputs and model staged from S3 on node ([0-9a-f]+)", output))
    assert staged == {*standin["nodes"]["head"], *standin["nodes"]["worker"]}, output[-5000:]
    assert len(standin["nodes"]["worker"]) == 1
