"""Device check of the verl backend: two GRPO steps of a tiny model on one GPU with the wordle environment.

    PYTHONPATH=. python -m benchmarks.device.verl_two_steps [--steps 2] [--work DIR] [--json]

The model is a two-layer Qwen2 made from a config here (random weights, no download) with the byte-level tokenizer
the CPU smoke uses (``mtrl.backends.verl.smoke.byte_tokenizer``). The run is what ``mtrl render`` renders for a
deployment whose verl model is that copy (``mtrl.backends.verl.offline.render_run``): the ConfigMap's ``run.json`` is
the run document, and the RayJob's own entrypoint (``python -m mtrl.backends.verl.train --run-config
/etc/mtrl/run.json``) is what runs, with the mounted path pointing at a local copy of that document and the S3 client
at the local bucket (``mtrl.backends.verl.train``: dataset conversion, the model's checksummed copy, verl's
overrides, the progress, signal and evaluation files), then verl's real GRPO trainer with vLLM, every rollout an
mtrl wordle episode played by ``MtrlAgentLoop``; the held-out rows are validated through the same loop before and
after training. The run's bucket is a local directory (no AWS). It prints, per step, the rollout and step figures
verl logs (generation time, step time, throughput, response length, turns, reward) and the held-out evaluation
before and after.

Without a GPU it runs everything up to the trainer's start — the tiny model built and loaded back from its verified
copy, the dataset converted, verl's trainer config composed with the run's real overrides, the agent loop loaded
from the registry file as verl loads it — and says plainly that the training steps need a GPU.

Exit codes: 0 — the steps trained and the figures are printed; 3 — no GPU here: everything up to the trainer's start
passed; 1 — a check or the trainer failed, or it trained fewer steps than asked; 2 — verl or torch is not installed,
or (with a GPU) Ray or vLLM, which the rendered trainer needs (verl runs on Ray and rolls out with vLLM): the report
names each missing module (run it in .venv-verl for the CPU part, or on a GPU machine in the trainer image or a venv
of requirements/verl-trainer.txt: docs/development.md, "Device checks").
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import io
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXIT_TRAINED, EXIT_FAILED, EXIT_NOT_INSTALLED, EXIT_NEEDS_GPU = 0, 1, 2, 3
BUCKET = "device-check"
RUN_ID = "wordle-device-check"
TRAIN_ROWS, EVAL_ROWS = 8, 2
# Per-step figures verl logs (verl/trainer/ppo/metric_utils.py, ray_trainer.py), as printed here.
STEP_FIGURES = {
    "timing_s/gen": "rollout s",
    "timing_s/step": "step s",
    "timing_s/update_actor": "update s",
    "perf/throughput": "tokens/s/GPU",
    "response_length/mean": "response tokens",
    "num_turns/mean": "turns",
    "critic/score/mean": "reward",
}
TINY_QWEN2 = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,  # head size 64: what vLLM's attention kernels support
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
}


class LocalBucket:
    """The few S3 client calls the trainer makes, on a local directory (the device check needs no AWS)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, bucket: str, key: str) -> Path:
        path = (self.root / bucket / key).resolve()
        if not path.is_relative_to(self.root.resolve()):
            raise ValueError(f"key escapes the bucket: {key}")
        return path

    def get_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        return {"Body": io.BytesIO(self._path(Bucket, Key).read_bytes())}

    def put_object(self, *, Bucket: str, Key: str, Body: bytes, **_: Any) -> dict[str, Any]:
        path = self._path(Bucket, Key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(Body)
        return {}

    def download_file(self, bucket: str, key: str, filename: str) -> None:
        shutil.copyfile(self._path(bucket, key), filename)

    def upload_file(self, filename: str, bucket: str, key: str) -> None:
        self.put_object(Bucket=bucket, Key=key, Body=Path(filename).read_bytes())

    def get_paginator(self, operation: str) -> LocalBucket:
        if operation != "list_objects_v2":
            raise ValueError(f"LocalBucket pages only list_objects_v2, not {operation}")
        return self

    def paginate(self, *, Bucket: str, Prefix: str = "") -> list[dict[str, Any]]:
        """One page of every key under ``Prefix`` (the export lists the run's checkpoints: mtrl.backends.verl.nodes)."""
        root = self.root / Bucket
        keys = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) if root.is_dir() else []
        return [{"Contents": [{"Key": key} for key in keys if key.startswith(Prefix)]}]


def build_model(into: Path) -> int:
    """A tiny Qwen2 with random weights and the byte-level tokenizer, saved as a Hugging Face model; its size."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from mtrl.backends.verl.smoke import byte_tokenizer

    tokenizer = byte_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **TINY_QWEN2,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(into, safe_serialization=True)
    tokenizer.save_pretrained(into)
    return sum(parameter.numel() for parameter in model.parameters())


# The rendered run's deployment: its one verl model is the staged copy; a one-GPU group (ml.g5.2xlarge: 1 GPU, no
# EFA); an image URI the render requires but nothing here pulls.
DEVICE_GROUP = {"name": "gpu", "instance_type": "ml.g5.2xlarge", "run_count": 1, "purpose": "training"}
DEVICE_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/verl-trainer@sha256:" + "0" * 64
MODEL_ID = "mtrl/tiny-qwen2"
GROUP_SIZE = 4
# What the trainer needs besides torch and verl once it trains: verl's trainer runs on Ray and rolls out with vLLM
# (the rendered config's actor_rollout_ref.rollout.name).
TRAINING_MODULES = ("ray", "vllm")


def stage_run(store: LocalBucket, model_dir: Path, *, steps: int, lora_rank: int) -> dict[str, Any]:
    """The model's checksummed copy and the wordle rows, as the pipeline would stage them, and the run document as
    ``mtrl render`` renders it (``rendered_run``)."""
    sums = ""
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        name = path.relative_to(model_dir).as_posix()
        store.upload_file(str(path), BUCKET, f"models/tiny-qwen2/{name}")
        sums += f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {name}\n"
    store.put_object(Bucket=BUCKET, Key="models/tiny-qwen2/SHA256SUMS", Body=sums.encode())
    sample = ROOT / "environments" / "wordle" / "sample"
    train_lines = (sample / "train.jsonl").read_text().splitlines()[:TRAIN_ROWS]
    eval_lines = (sample / "eval.jsonl").read_text().splitlines()[:EVAL_ROWS]
    store.put_object(Bucket=BUCKET, Key=f"runs/{RUN_ID}/data/train.jsonl", Body="\n".join(train_lines).encode())
    store.put_object(Bucket=BUCKET, Key=f"runs/{RUN_ID}/data/eval.jsonl", Body="\n".join(eval_lines).encode())
    document, _ = rendered_run(hashlib.sha256(sums.encode()).hexdigest(), steps=steps, lora_rank=lora_rank)
    return document


def rendered_run(sums_sha256: str, *, steps: int, lora_rank: int) -> tuple[dict[str, Any], str]:
    """(the ConfigMap's run document, the RayJob's entrypoint) as ``mtrl render`` renders them for this run."""
    from mtrl.backends.verl.offline import render_run
    from mtrl.contracts.backend import RunContext
    from mtrl.runs.manifest import resolve_run_settings
    from mtrl.settings import load_settings

    model = {"id": MODEL_ID, "s3_uri": f"s3://{BUCKET}/models/tiny-qwen2/", "sha256": sums_sha256}
    deploy = load_settings(
        {
            "verl_models": json.dumps([model]),
            "verl_image_uri": DEVICE_IMAGE,
            "hyperpod_instance_groups": json.dumps([DEVICE_GROUP]),
        },
        environ={"CDK_DEFAULT_REGION": "us-east-1"},
    )
    manifest = {
        "backend": "verl",
        "environment": "wordle",
        "instance_count": 1,
        "baseline_evaluation": True,
        "eval_dataset": "eval-data/wordle-device-check.jsonl",  # the run's held-out rows (the RunContext's copy)
        "backend_options": {"steps": steps, "lora_rank": lora_rank, "group_size": GROUP_SIZE},
    }
    run = RunContext(
        run_id=RUN_ID,
        settings={},
        dataset_uri=f"s3://{BUCKET}/runs/{RUN_ID}/data/train.jsonl",
        eval_dataset_uri=f"s3://{BUCKET}/runs/{RUN_ID}/data/eval.jsonl",
        output_uri=f"s3://{BUCKET}/runs/{RUN_ID}/",
    )
    config_map, rayjob = render_run(deploy, resolve_run_settings(deploy, manifest), run)
    (run_json,) = config_map["data"].values()
    return json.loads(run_json), str(rayjob["spec"]["entrypoint"])


def entrypoint_arguments(entrypoint: str, run_config: Path) -> list[str]:
    """The arguments the RayJob's entrypoint passes to the trainer module, its mounted run document replaced by the
    local copy; refuses an entrypoint that is not ``python -m mtrl.backends.verl.train ...``."""
    from mtrl.backends.verl.rayjob import CONFIG_DIR, CONFIG_FILE, TRAINER_MODULE

    words = shlex.split(entrypoint)
    if words[:3] != ["python", "-m", TRAINER_MODULE]:
        raise RuntimeError(f"the rendered entrypoint does not run {TRAINER_MODULE}: {entrypoint!r}")
    mounted = f"{CONFIG_DIR}/{CONFIG_FILE}"
    if mounted not in words:
        raise RuntimeError(f"the rendered entrypoint does not read {mounted}: {entrypoint!r}")
    return [str(run_config) if word == mounted else word for word in words[3:]]


def missing_training_modules() -> list[str]:
    return [name for name in TRAINING_MODULES if importlib.util.find_spec(name) is None]


def training_verdict(*, gpu: bool, missing: Sequence[str]) -> tuple[int, str] | None:
    """Why the GRPO steps cannot run here, with the exit code; None when they can."""
    if missing:
        reason = (
            f"{', '.join(missing)} not installed: the rendered trainer runs verl on Ray with vLLM rollouts "
            "(actor_rollout_ref.rollout.name=vllm)"
        )
        if gpu:
            return EXIT_NOT_INSTALLED, reason
        return EXIT_NEEDS_GPU, f"no CUDA device here, and {reason}; the GRPO steps need one GPU and both"
    if not gpu:
        return (
            EXIT_NEEDS_GPU,
            "no CUDA device here: everything up to the trainer's start passed; the GRPO steps need one GPU",
        )
    return None


def up_to_the_trainer_start(document: dict[str, Any], store: LocalBucket) -> dict[str, Any]:
    """Everything the trainer does before verl starts, checked: what a machine without a GPU can prove."""
    import torch
    from hydra.utils import get_class
    from omegaconf import OmegaConf
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase

    from mtrl.backends.verl import train

    launch = train.prepare_launch(document, store, gpus_per_node=int(document.get("gpus_per_node") or 1))
    config = train.composed_config(launch.overrides)
    rollout = config.actor_rollout_ref.rollout
    registry = OmegaConf.load(str(rollout.agent.agent_loop_config_path))  # as AgentLoopWorker loads it
    loops = {str(entry.name): get_class(str(entry["_target_"])) for entry in registry}
    loop = loops.get(str(rollout.agent.default_agent_loop))
    if loop is None or not issubclass(loop, AgentLoopBase):
        raise RuntimeError(f"the agent loop '{rollout.agent.default_agent_loop}' is not registered: {loops}")
    tokenizer = AutoTokenizer.from_pretrained(launch.model_path)
    model = AutoModelForCausalLM.from_pretrained(launch.model_path)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Guess the 5-letter word"}], tokenize=True)
    ids = prompt["input_ids"] if hasattr(prompt, "keys") else prompt
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([list(ids)])).logits
    return {
        "train_rows": launch.prepared.train_rows,
        "eval_rows": launch.prepared.eval_tasks,
        "model_path": launch.model_path,
        "logits_shape": list(logits.shape),
        "agent_loop": f"{loop.__module__}.{loop.__qualname__}",
        "rollout_engine": str(rollout.name),
        "batch_prompts": int(config.data.train_batch_size),
        "group_size": int(rollout.n),
        "val_before_train": bool(config.trainer.val_before_train),
    }


class Tee(io.TextIOBase):
    """Passes the trainer's output through and keeps its step lines."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.lines: list[str] = []
        self._partial = ""

    def write(self, text: str) -> int:
        self.out.write(text)
        self._partial += text
        *complete, self._partial = self._partial.split("\n")
        self.lines.extend(complete)
        return len(text)

    def flush(self) -> None:
        self.out.flush()


def train_steps(store: LocalBucket, arguments: list[str]) -> tuple[int, list[dict[str, Any]]]:
    """The trainer module's main with the rendered entrypoint's arguments (``entrypoint_arguments``)."""
    from mtrl.backends.verl import progress as verl_progress
    from mtrl.backends.verl import train

    tee = Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        code = train.main(arguments, s3=store)
    steps = []
    for line in tee.lines:
        parsed = verl_progress.parse_step_line(line)
        if parsed is not None and parsed[0] > 0:
            step, metrics = parsed
            steps.append({"step": step, **{label: metrics.get(name) for name, label in STEP_FIGURES.items()}})
    return code, steps


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.device.verl_two_steps")
    parser.add_argument("--steps", type=int, default=2, help="GRPO steps to train (default 2)")
    parser.add_argument("--lora-rank", type=int, default=8, help="LoRA rank (0: full fine-tuning)")
    parser.add_argument("--work", type=Path, help="working directory (default: a new temporary one)")
    parser.add_argument("--json", action="store_true", help="print one JSON report at the end")
    options = parser.parse_args(argv)
    try:
        import torch
        import verl  # noqa: F401 - the check needs verl itself
    except ImportError as error:
        print(
            f"verl or torch is not installed here ({error}): run this in .venv-verl (CPU part) or on a GPU "
            "machine in the trainer image",
            file=sys.stderr,
        )
        return EXIT_NOT_INSTALLED
    work = options.work or Path(tempfile.mkdtemp(prefix="mtrl-device-"))
    # Ray's workers (verl's agent-loop workers) import mtrl from the repository.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    from mtrl.backends.verl import train

    train.WORK_DIR = work / "trainer"
    store = LocalBucket(work / "bucket")
    report: dict[str, Any] = {"gpu": torch.cuda.is_available(), "steps_asked": options.steps}
    started = time.perf_counter()
    try:
        model_dir = work / "tiny-qwen2"
        report["model_parameters"] = build_model(model_dir)
        document = stage_run(store, model_dir, steps=options.steps, lora_rank=options.lora_rank)
        run_config = work / "run.json"
        run_config.write_text(json.dumps(document, indent=2))
        _, entrypoint = rendered_run(document["model"]["sha256"], steps=options.steps, lora_rank=options.lora_rank)
        arguments = entrypoint_arguments(entrypoint, run_config)
        report["entrypoint"] = entrypoint
        report["before_trainer_start"] = up_to_the_trainer_start(document, store)
    except Exception as error:  # the report says what failed, the exit code says that it did
        report["error"] = f"{type(error).__name__}: {error}"
        return _finish(report, options.json, EXIT_FAILED)
    report["prepare_seconds"] = round(time.perf_counter() - started, 1)
    report["missing"] = missing_training_modules()
    verdict = training_verdict(gpu=torch.cuda.is_available(), missing=report["missing"])
    if verdict is not None:
        code, reason = verdict
        report["needs_gpu" if code == EXIT_NEEDS_GPU else "error"] = f"{reason} (exit {code})"
        return _finish(report, options.json, code)
    report["gpu_name"] = torch.cuda.get_device_name(0)
    started = time.perf_counter()
    code, steps = train_steps(store, arguments)
    report.update(trainer_exit=code, train_seconds=round(time.perf_counter() - started, 1), steps=steps)
    evaluation = work / "bucket" / BUCKET / "runs" / RUN_ID / "evaluation.json"
    report["evaluation"] = json.loads(evaluation.read_text()) if evaluation.exists() else None
    trained = max((row["step"] for row in steps), default=0)
    ok = code == 0 and trained >= options.steps
    if not ok:
        report["error"] = f"the trainer exited {code} after {trained} of {options.steps} steps"
    return _finish(report, options.json, EXIT_TRAINED if ok else EXIT_FAILED)


def _finish(report: dict[str, Any], as_json: bool, code: int) -> int:
    report["exit_code"] = code
    if as_json:
        print(json.dumps(report, sort_keys=True, default=str))
        return code
    before = report.get("before_trainer_start") or {}
    print(f"model: tiny Qwen2, {report.get('model_parameters', '?')} parameters (from a config, no download)")
    for name, value in before.items():
        print(f"  {name}: {value}")
    for row in report.get("steps") or []:
        figures = ", ".join(
            f"{label} {row[label]:.4g}" for label in STEP_FIGURES.values() if row.get(label) is not None
        )
        print(f"step {row['step']}: {figures}")
    if report.get("evaluation"):
        print(f"held-out evaluation: {json.dumps(report['evaluation'], sort_keys=True)}")
    if report.get("needs_gpu"):
        print(f"NEEDS A GPU: {report['needs_gpu']}")
    if report.get("error"):
        print(f"FAILED: {report['error']}")
    return code


if __name__ == "__main__":
    sys.exit(main())
