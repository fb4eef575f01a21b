"""The verl trainer's entry point in the image: ``python -m mtrl.backends.verl.train --run-config /etc/mtrl/run.json``.

The RayJob's submitter runs it on the head (``mtrl.backends.verl.rayjob``). It

1. converts the run's validated dataset (and its held-out split) from mtrl rows (``{"id", "metadata"}``) into the
   parquet rows verl's ``RLHFDataset`` reads, each choosing the ``mtrl`` agent loop (``agent_name``) and carrying the
   environment id, the row's ``metadata`` (the task) and the environment's arguments (as JSON text) in ``extra_info``;
2. writes the agent-loop registry file (``mtrl`` → ``mtrl.backends.verl.agent_loop.MtrlAgentLoop``) and runs
   ``verl.trainer.main_ppo`` with GRPO overrides from the run's plan (model, LoRA rank, group size, steps, lengths,
   nodes);
3. follows the trainer's console log (``step:N - name:value - ...``, verl's ``LocalLogger``): after every step it
   writes ``progress.json`` (``{"step": N}``: the adapter's planned-step check) and ``signals.jsonl`` (the trainer-side
   fields of the training-health rows: reward, truncation, entropy, KL, gradient norm, turns; the environment side
   comes from the step's rollout dump, read on the node verl's TaskRunner writes it on: ``rollouts``), and after each of
   verl's validations of the held-out split (through the same agent loop: before training with the run's
   ``baseline_evaluation``, and at the last step) ``evaluation.json`` (``mtrl.backends.verl.evaluation``);
4. copies the checkpoints it wrote under the run's output prefix.

The parts that need no GPU (conversion, overrides, log parsing, progress and signal files) are tested on CPU; the
training itself runs only on the cluster.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtrl.backends.verl import image
from mtrl.backends.verl.hydra import hydra_value
from mtrl.backends.verl.hyperparameters import VERL_HYPERPARAMETERS, hyperparameter_problems
from mtrl.backends.verl.model_copy import parse_sums
from mtrl.backends.verl.nodes import (
    TrainError,
    cluster_nodes,
    download_tree,
    export_model,
    node_id,
    on_a_cluster,
    run_on_nodes,
    upload_file,
    upload_tree,
)
from mtrl.backends.verl.progress import Progress, follow
from mtrl.backends.verl.rollout_rows import ROLLOUT_DIR
from mtrl.backends.verl.rollouts import Rollouts
from mtrl.contracts.hub import MODEL_SUMS_FILE
from mtrl.settings.verl import model_sums_object
from mtrl.validation.rows import RowError, RowSource, iter_rows

MERGED_DIR = "huggingface"  # output/huggingface/: the merged model (and lora_adapter/) a run delivers
AGENT_NAME = "mtrl"
AGENT_LOOP_CLASS = "mtrl.backends.verl.agent_loop.MtrlAgentLoop"
# Prompts per training step (each played group_size times) unless the run document says otherwise; never more than
# the dataset holds.
PROMPTS_PER_STEP = 16
# Each pod's own scratch space (the same path on every node; nothing written there is seen by another pod).
WORK_DIR = Path(os.environ.get("MTRL_VERL_WORK_DIR", "/var/lib/mtrl-verl"))
REGISTRY_FILE = "agent_loops.yaml"
INPUTS_DIR = "verl-inputs/"  # under the run's output prefix: what every node fetches (publish_inputs)
CHECKPOINTS_DIR = "checkpoints/"  # under output/: every node's share of verl's checkpoints


def verl_rows(source: RowSource, *, env_id: str, env_args: Mapping[str, Any]) -> list[dict[str, Any]]:
    """verl dataset rows from a validated mtrl JSONL dataset (read by ``mtrl.validation.rows``: raises RowError)."""
    rows = []
    for index, (_number, document) in enumerate(iter_rows(source)):
        metadata = document["metadata"]
        prompt = metadata.get("prompt", "")
        text = prompt if isinstance(prompt, str) else json.dumps(prompt)
        rows.append(
            {
                "data_source": f"mtrl/{env_id}",
                "agent_name": AGENT_NAME,
                # The agent loop builds the real prompt (system prompt + the environment's first observation);
                # this one is what verl's dataset filters by length and logs.
                "prompt": [{"role": "user", "content": text}],
                "ability": "multi_turn",
                "reward_model": {"style": "environment", "ground_truth": ""},
                # JSON text, not nested objects: parquet would give rows with different metadata keys one merged
                # struct (missing keys read back as nulls), and cannot store an empty one.
                "extra_info": {
                    "index": index,
                    "row_id": str(document.get("id", index)),
                    "env_id": env_id,
                    "task_json": json.dumps(metadata, ensure_ascii=False, sort_keys=True),
                    "env_args_json": json.dumps(dict(env_args), sort_keys=True),
                },
            }
        )
    return rows


def agent_loop_registry() -> str:
    """The file ``actor_rollout_ref.rollout.agent.agent_loop_config_path`` names (a YAML list; JSON is YAML)."""
    return json.dumps([{"name": AGENT_NAME, "_target_": AGENT_LOOP_CLASS}], indent=2) + "\n"


def fetch_model(document: Mapping[str, Any], s3: Any, work: Path) -> str:
    """Where verl loads the model from: the operator's S3 copy, downloaded and verified file by file against its
    ``SHA256SUMS`` (whose own SHA-256 the deployment pinned), or — only with ``verl_hub_downloads`` — the Hub at a
    pinned revision. Anything else is refused, naming the run."""
    model = document["model"]
    run_id = document.get("run_id")
    if model.get("s3_uri"):
        return str(_verified_copy(s3, str(model["s3_uri"]), str(model["sha256"]), work / "model", run_id=run_id))
    if model.get("hub_downloads") and model.get("revision"):
        from huggingface_hub import snapshot_download  # noqa: PLC0415 - the trainer image's library

        return str(snapshot_download(repo_id=str(model["id"]), revision=str(model["revision"])))
    raise TrainError(
        f"run {run_id}: model '{model.get('id')}' has no S3 copy (s3_uri + sha256) and Hub downloads are off "
        "(verl_hub_downloads, with a pinned revision)"
    )


def _verified_copy(s3: Any, prefix_uri: str, sums_sha256: str, into: Path, *, run_id: Any) -> Path:
    bucket, sums_key = model_sums_object(prefix_uri)
    prefix = sums_key.removesuffix(MODEL_SUMS_FILE)
    sums = s3.get_object(Bucket=bucket, Key=sums_key)["Body"].read()
    if hashlib.sha256(sums).hexdigest() != sums_sha256:
        raise TrainError(f"run {run_id}: {prefix_uri}SHA256SUMS does not match the deployment's sha256")
    try:
        expected = parse_sums(sums.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise TrainError(f"run {run_id}: {prefix_uri}SHA256SUMS: {error}") from None
    into.mkdir(parents=True, exist_ok=True)
    root = into.resolve()
    for name, digest in sorted(expected.items()):
        target = into / name
        if not target.resolve().is_relative_to(root):  # a symlink planted under the model directory
            raise TrainError(f"run {run_id}: {prefix_uri}SHA256SUMS names {name!r}, outside the model directory")
        target.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(bucket, prefix + name, str(target))
        if _file_sha256(target) != digest:
            raise TrainError(f"run {run_id}: {prefix_uri}{name} does not match its SHA256SUMS entry")
    return into


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def overrides(
    document: Mapping[str, Any],
    *,
    model_path: str,
    train_file: Path,
    val_file: Path | None,
    agent_config: Path,
    local_dir: Path,
    gpus_per_node: int,
    train_rows: int = PROMPTS_PER_STEP,
    rollout_dir: Path | None = None,
) -> list[str]:
    """``verl.trainer.main_ppo`` Hydra overrides for the run's plan (GRPO, the mtrl agent loop, async rollout).

    Besides the plan, the values verl has no usable default for: the rollout engine (``rollout.name`` is mandatory),
    one rollout replica per GPU (verl's default tensor parallelism is 2), a step's prompts (verl's default batch of
    1024 prompts is larger than most datasets, and a dataloader with no full batch trains nothing), one policy
    update per step (mini-batch = batch) with token-budgeted micro-batches (``use_dynamic_bsz``; without it verl
    requires per-GPU micro-batch sizes), and enough epochs for the planned steps.
    """
    lora_rank = int(document["lora_rank"])
    steps = int(document["steps"])
    prompts = max(1, min(int(document.get("prompts_per_step") or PROMPTS_PER_STEP), train_rows))
    sequence = int(document["max_prompt_length"]) + int(document["max_response_length"])
    values: dict[str, Any] = {
        # verl 0.9.1 defaults to its new trainer (verl/trainer/config/ppo_trainer.yaml: trainer.use_v1: true), whose
        # TaskRunnerV1 first imports transfer_queue (verl/trainer/main_ppo.py), a package only verl's verl-core extra
        # brings. mtrl trains with the RayPPOTrainer path (verl/trainer/main_ppo_v0.py's TaskRunner): its agent loop
        # manager, its console metrics and its rollout dump are what MtrlAgentLoop, follow() and rollout_rows read.
        "trainer.use_v1": False,
        "algorithm.adv_estimator": "grpo",
        "data.train_files": str(train_file),
        # verl builds a validation dataset whatever the settings: without held-out rows it is the training file,
        # never played (no validation before training, none during it).
        "data.val_files": str(val_file or train_file),
        "data.max_prompt_length": int(document["max_prompt_length"]),
        "data.max_response_length": int(document["max_response_length"]),
        "data.return_raw_chat": True,
        "actor_rollout_ref.model.path": str(model_path),
        "actor_rollout_ref.model.lora_rank": lora_rank,
        "actor_rollout_ref.rollout.n": int(document["group_size"]),
        "actor_rollout_ref.rollout.mode": "async",
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
        "data.train_batch_size": prompts,
        "actor_rollout_ref.actor.ppo_mini_batch_size": prompts,
        "actor_rollout_ref.actor.use_dynamic_bsz": True,
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": max(sequence, 16384),
        # GRPO's KL term against the reference policy (verl's actor.yaml: use_kl_loss, kl_loss_coef 0.001,
        # low_var_kl): keeps the policy near the base model, and is the health rows' `kl` (actor/kl_loss).
        "actor_rollout_ref.actor.use_kl_loss": True,
        "actor_rollout_ref.actor.kl_loss_coef": 0.001,
        "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
        "trainer.total_epochs": math.ceil(steps / max(1, train_rows // prompts)),
        "actor_rollout_ref.rollout.prompt_length": int(document["max_prompt_length"]),
        "actor_rollout_ref.rollout.response_length": int(document["max_response_length"]),
        "actor_rollout_ref.rollout.agent.default_agent_loop": AGENT_NAME,
        "actor_rollout_ref.rollout.agent.agent_loop_config_path": str(agent_config),
        "trainer.total_training_steps": steps,
        # The held-out split through the same agent loop: before training for the baseline, and at the last step.
        "trainer.val_before_train": val_file is not None and bool(document.get("baseline_evaluation")),
        "trainer.test_freq": steps if val_file is not None else -1,
        "trainer.nnodes": int(document["nnodes"]),
        "trainer.n_gpus_per_node": gpus_per_node,
        "trainer.default_local_dir": str(local_dir),
        "trainer.resume_mode": "auto",
        "trainer.save_freq": steps,
        # The console log is what follow() reads; with the deployment's MLflow app, verl's MLflow logger sends the
        # same metrics there (experiment "mtrl", one MLflow run per mtrl run, named by its id).
        "trainer.logger": ["console", "mlflow"] if document.get("mlflow_tracking_uri") else ["console"],
        "trainer.project_name": "mtrl",
        "trainer.experiment_name": str(document["run_id"]),
    }
    if rollout_dir is not None:  # each step's samples, for the environment side of its health row (rollout_rows)
        values["trainer.rollout_data_dir"] = str(rollout_dir)
    if lora_rank > 0:
        values["actor_rollout_ref.model.lora_alpha"] = 2 * lora_rank
        values["actor_rollout_ref.model.target_modules"] = "all-linear"
        values["actor_rollout_ref.rollout.load_format"] = "safetensors"
    hyper = dict(document.get("hyperparameters") or {})
    problems = hyperparameter_problems(hyper)  # Register refused these; a record edited since is refused again
    if problems:
        raise TrainError(f"run {document.get('run_id')}: " + "; ".join(problems))
    for name, value in hyper.items():
        values[VERL_HYPERPARAMETERS[name].override] = value
    found = [f"{key}={hydra_value(value)}" for key, value in values.items()]
    found += image.model_overrides()  # the attention the trainer image has (verl's default needs flash_attn)
    # The agent loop's own settings live under a key verl does not define (added with '+').
    found.append(f"+mtrl.run_id={hydra_value(str(document['run_id']))}")
    if document.get("episode_timeout_s"):
        found.append(f"+mtrl.episode_timeout_s={hydra_value(float(document['episode_timeout_s']))}")
    return found


def _dataset_rows(document: Mapping[str, Any], s3: Any, uri: str) -> list[dict[str, Any]]:
    """The verl rows of the dataset object at ``uri`` (TrainError naming the line that is not a row)."""
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    body: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    env_id, env_args = str(document["environment"]), document.get("environment_args") or {}
    try:
        return verl_rows(body, env_id=env_id, env_args=env_args)
    except RowError as error:
        raise TrainError(f"run {document.get('run_id')}: {uri} {error}") from None


def _write_parquet(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    import pandas as pd  # noqa: PLC0415 - the trainer image's library, not mtrl's

    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(list(rows)).to_parquet(path)


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` wrote under the run's work directory."""

    train: Path
    val: Path | None
    registry: Path
    train_rows: int
    eval_tasks: int


def prepare(document: Mapping[str, Any], s3: Any, work: Path) -> Prepared:
    """The dataset files and the agent-loop registry, under ``work``."""
    train = work / "data" / "train.parquet"
    train_rows = _dataset_rows(document, s3, document["dataset_uri"])
    if not train_rows:
        raise TrainError(f"run {document.get('run_id')}: the training rows {document['dataset_uri']} are empty")
    _write_parquet(train_rows, train)
    val: Path | None = None
    eval_rows: list[dict[str, Any]] = []
    if document.get("eval_dataset_uri"):
        val = work / "data" / "eval.parquet"
        eval_rows = _dataset_rows(document, s3, document["eval_dataset_uri"])
        if not eval_rows:
            raise TrainError(
                f"run {document.get('run_id')}: the held-out split {document['eval_dataset_uri']} is empty"
            )
        _write_parquet(eval_rows, val)
    registry = work / REGISTRY_FILE
    registry.write_text(agent_loop_registry(), encoding="utf-8")
    return Prepared(train, val, registry, train_rows=len(train_rows), eval_tasks=len(eval_rows))


@dataclass(frozen=True)
class Launch:
    """Everything up to the trainer's start: the data, the verified model copy and verl's overrides."""

    prepared: Prepared
    model_path: str
    local_dir: Path
    overrides: list[str]
    rollout_dir: Path | None = None
    nodes: tuple[str, ...] = ()  # the nodes that hold the run's inputs (their Ray node ids; empty off a cluster)


def run_work_dir(document: Mapping[str, Any]) -> Path:
    """The run's directory on every node's own disk (the same path on each: verl passes one path to all of them)."""
    return WORK_DIR / str(document["run_id"]).replace("/", "_")


def inputs_prefix(document: Mapping[str, Any]) -> str:
    """Where the head publishes what every node reads: the dataset files and the agent-loop registry."""
    return str(document["output_uri"]).rstrip("/") + "/" + INPUTS_DIR


def input_files(document: Mapping[str, Any]) -> list[str]:
    """What every node reads, relative to the run's work directory (``prepare`` writes them on the head)."""
    names = [REGISTRY_FILE, "data/train.parquet"]
    if document.get("eval_dataset_uri"):
        names.append("data/eval.parquet")
    return names


def publish_inputs(s3: Any, document: Mapping[str, Any], work: Path) -> None:
    """The converted dataset and the agent-loop registry under the run's own output prefix: no pod sees another's
    disk, so each node fetches them from S3 (``stage_node``)."""
    for name in input_files(document):
        upload_file(s3, work / name, inputs_prefix(document) + name)


def stage_node(document: Mapping[str, Any], s3: Any = None) -> dict[str, str]:
    """On one node: the run's inputs (``publish_inputs``) and the verified model copy under the node's own work
    directory, fetched from S3 by the node itself. verl's TaskRunner (tokenizer, datasets), its actor and rollout
    workers (the model) and its agent-loop workers (the registry) run on whichever node Ray places them."""
    if s3 is None:
        import boto3  # noqa: PLC0415 - the image's AWS SDK

        s3 = boto3.client("s3")
    work = run_work_dir(document)
    bucket, _, prefix = inputs_prefix(document).removeprefix("s3://").partition("/")
    for name in input_files(document):
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(bucket, prefix + name, str(work / name))
    model_path = fetch_model(document, s3, work)
    return {"node": node_id(), "model_path": model_path}


def stage_every_node(document: Mapping[str, Any], s3: Any) -> tuple[str, tuple[str, ...]]:
    """(model path, node ids): every node of the cluster staged (``stage_node``); off a cluster, this machine."""
    if not on_a_cluster():
        return stage_node(document, s3)["model_path"], ()
    import ray  # noqa: PLC0415 - the image's library

    ray.init()
    try:
        nodes = [str(node["NodeID"]) for node in cluster_nodes(gpu_nodes=int(document["nnodes"]))]
        staged = run_on_nodes(stage_node, nodes, dict(document))
    finally:
        ray.shutdown()
    for found in staged:
        print(f"run {document.get('run_id')}: inputs and model staged from S3 on node {found['node']}", flush=True)
    paths = {str(found["model_path"]) for found in staged}
    if len(paths) != 1:  # verl passes one model path to every worker
        raise TrainError(f"run {document.get('run_id')}: the nodes hold the model at different paths: {sorted(paths)}")
    return paths.pop(), tuple(nodes)


def prepare_launch(document: Mapping[str, Any], s3: Any, *, gpus_per_node: int) -> Launch:
    work = run_work_dir(document)
    prepared = prepare(document, s3, work)
    publish_inputs(s3, document, work)
    model_path, nodes = stage_every_node(document, s3)
    local_dir = work / "checkpoints"
    rollout_dir = work / ROLLOUT_DIR
    chosen = overrides(
        document,
        model_path=model_path,
        train_file=prepared.train,
        val_file=prepared.val,
        agent_config=prepared.registry,
        local_dir=local_dir,
        gpus_per_node=gpus_per_node,
        train_rows=prepared.train_rows,
        rollout_dir=rollout_dir,
    )
    return Launch(prepared, model_path, local_dir, chosen, rollout_dir, nodes)


def trainer_environment(document: Mapping[str, Any]) -> dict[str, str]:
    """The trainer's environment: this one, plus the MLflow tracking URI verl's MLflow logger reads (a SageMaker
    MLflow app ARN: the image's ``sagemaker-mlflow`` plugin resolves it and signs the calls with the pod's
    credentials)."""
    environment = dict(os.environ)
    if document.get("mlflow_tracking_uri"):
        environment["MLFLOW_TRACKING_URI"] = str(document["mlflow_tracking_uri"])
    return environment


def trainer_command() -> list[str]:
    """verl's PPO entry point (``MTRL_VERL_TRAINER`` replaces it, for tests of everything around it)."""
    override = os.environ.get("MTRL_VERL_TRAINER")
    return shlex.split(override) if override else [sys.executable, "-m", "verl.trainer.main_ppo"]


def main(argv: Sequence[str] | None = None, *, s3: Any = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mtrl.backends.verl.train")
    parser.add_argument("--run-config", required=True, type=Path, help="the run document (the ConfigMap's run.json)")
    parser.add_argument(
        "--gpus-per-node", type=int, default=None, help="default: the run document's gpus_per_node (the node's GPUs)"
    )
    parser.add_argument(
        "--compose-only",
        action="store_true",
        help="compose verl's own trainer config with the run's overrides and print the chosen values (no data, no "
        "training): proves every override names a key verl has",
    )
    options = parser.parse_args(argv)
    document = json.loads(options.run_config.read_text(encoding="utf-8"))
    if options.compose_only:
        print(json.dumps(compose(document), indent=2, sort_keys=True))
        return 0
    if s3 is None:
        import boto3  # noqa: PLC0415 - the image's AWS SDK; tests pass a client

        s3 = boto3.client("s3")
    gpus = options.gpus_per_node or int(document.get("gpus_per_node") or 1)
    launch = prepare_launch(document, s3, gpus_per_node=gpus)
    code = train_and_follow(document, s3, launch)
    if code != 0:
        return code
    collect_checkpoints(document, s3, launch.nodes)
    return export_run(document, s3, launch.nodes)


def trainer_rollouts(launch: Launch) -> Rollouts | None:
    """Where the step dumps are read: on a cluster, on the node verl's TaskRunner lands on (``rollouts``)."""
    return Rollouts(launch.rollout_dir, cluster=bool(launch.nodes)) if launch.rollout_dir is not None else None


def train_and_follow(document: Mapping[str, Any], s3: Any, launch: Launch) -> int:
    """verl's trainer, its output passed through to the job's log and followed (``progress.follow``); its exit code."""
    rollouts = trainer_rollouts(launch)
    progress = Progress(
        s3,
        document["output_uri"],
        planned_steps=int(document["steps"]),
        group_size=int(document["group_size"]),
        eval_tasks=launch.prepared.eval_tasks,
        rollouts=rollouts,
    )
    progress.start()
    command = trainer_command() + launch.overrides
    try:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=trainer_environment(document)
        )
        assert process.stdout is not None
        for line in follow(process.stdout, progress):
            sys.stdout.write(line)
        code = process.wait()
        progress.finish()
    finally:
        if rollouts is not None:
            rollouts.close()  # before the checkpoint and export steps join the cluster again
    return code


def output_prefix(document: Mapping[str, Any]) -> str:
    return str(document["output_uri"]).rstrip("/") + "/output/"


def upload_node_checkpoints(document: Mapping[str, Any], s3: Any = None) -> int:
    """On one node: its share of verl's checkpoints (each rank writes its own shards where it runs) under
    ``output/checkpoints/``; the number of files."""
    if s3 is None:
        import boto3  # noqa: PLC0415 - the image's AWS SDK

        s3 = boto3.client("s3")
    return upload_tree(s3, run_work_dir(document) / "checkpoints", output_prefix(document) + CHECKPOINTS_DIR)


def collect_checkpoints(document: Mapping[str, Any], s3: Any, nodes: Sequence[str]) -> None:
    """Every node's checkpoint files in S3: the only place they meet."""
    if not nodes:
        upload_node_checkpoints(document, s3)
        return
    import ray  # noqa: PLC0415 - the image's library

    ray.init()
    try:
        run_on_nodes(upload_node_checkpoints, nodes, dict(document))
    finally:
        ray.shutdown()


def export_node(document: Mapping[str, Any], s3: Any = None) -> tuple[int, str | None]:
    """On the node that exports: the run's checkpoints from S3 (``collect_checkpoints``), merged by verl's model merger
    into ``output/huggingface/``; (exit code, the problem)."""
    if s3 is None:
        import boto3  # noqa: PLC0415 - the image's AWS SDK

        s3 = boto3.client("s3")
    work = run_work_dir(document) / "export"
    checkpoints = work / "checkpoints"
    download_tree(s3, output_prefix(document) + CHECKPOINTS_DIR, checkpoints)
    prefix = output_prefix(document) + MERGED_DIR + "/"
    return export_model(s3, checkpoints, work / MERGED_DIR, prefix, run_id=document["run_id"])


def export_run(document: Mapping[str, Any], s3: Any, nodes: Sequence[str]) -> int:
    """The export, on a GPU worker (the head is small: mtrl.backends.verl.rayjob.HEAD_MEMORY); off a cluster, here."""
    if nodes:
        import ray  # noqa: PLC0415 - the image's library

        ray.init()
        try:
            gpu = [str(node["NodeID"]) for node in cluster_nodes(gpu_nodes=1) if node["Resources"].get("GPU", 0) > 0]
            (result,) = run_on_nodes(export_node, gpu[:1], dict(document))
        finally:
            ray.shutdown()
        code, problem = result
    else:
        code, problem = export_node(document, s3)
    if problem:
        print(problem, file=sys.stderr, flush=True)
    return int(code)


def composed_config(chosen: Sequence[str]) -> Any:
    """verl's ``ppo_trainer`` config with these overrides, as ``main_ppo`` composes it (a key verl lacks raises)."""
    from hydra import compose as hydra_compose  # noqa: PLC0415 - the trainer image's libraries
    from hydra import initialize_config_module  # noqa: PLC0415

    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=list(chosen))


def compose(document: Mapping[str, Any]) -> dict[str, Any]:
    """verl's ``ppo_trainer`` config composed with the run's overrides (Hydra raises on a key verl lacks)."""
    from omegaconf import OmegaConf  # noqa: PLC0415 - the trainer image's library

    work = Path("/nonexistent")
    chosen = overrides(
        document,
        model_path="model",
        train_file=work / "train.parquet",
        val_file=work / "eval.parquet" if document.get("eval_dataset_uri") else None,
        agent_config=work / "agent_loops.yaml",
        local_dir=work / "checkpoints",
        rollout_dir=work / ROLLOUT_DIR,
        gpus_per_node=1,
    )
    config = composed_config(chosen)
    values = {key: OmegaConf.select(config, key) for key in (item.split("=", 1)[0].lstrip("+") for item in chosen)}
    return {
        key: OmegaConf.to_container(value) if OmegaConf.is_config(value) else value for key, value in values.items()
    }


if __name__ == "__main__":
    sys.exit(main())
