"""Device check of the verl backend: two GRPO steps of a tiny model on one GPU with the wordle environment.

    PYTHONPATH=. python -m benchmarks.device.verl_two_steps [--steps 2] [--work DIR] [--json]

The model is a two-layer Qwen2 made from a config here (random weights, no download) with the byte-level tokenizer
the CPU smoke uses (``mtrl.backends.verl.smoke.byte_tokenizer``). The run goes through the trainer's own entry point
(``mtrl.backends.verl.train``: dataset conversion, the model's checksummed copy, verl's overrides, the progress,
signal and evaluation files) and verl's real GRPO trainer with vLLM, every rollout an mtrl wordle episode played by
``MtrlAgentLoop``; the held-out rows are validated through the same loop before and after training. The run's bucket
is a local directory (no AWS). It prints, per step, the rollout and step figures verl logs (generation time, step
time, throughput, response length, turns, reward) and the held-out evaluation before and after.

Without a GPU it runs everything up to the trainer's start — the tiny model built and loaded back from its verified
copy, the dataset converted, verl's trainer config composed with the run's real overrides, the agent loop loaded
from the registry file as verl loads it — and says plainly that the training steps need a GPU.

Exit codes: 0 — the steps trained and the figures are printed; 3 — no GPU here: everything up to the trainer's start
passed; 1 — a check or the trainer failed, or it trained fewer steps than asked; 2 — verl or torch is not installed
(run it in .venv-verl for the CPU part, or on a GPU machine in the trainer image or a venv of
requirements/verl-trainer.txt: docs/development.md, "Device checks").
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
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


def stage_run(store: LocalBucket, model_dir: Path, *, steps: int, lora_rank: int) -> dict[str, Any]:
    """The model's checksummed copy, the wordle rows and the run document, as the pipeline would stage them."""
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
    return {
        "run_id": RUN_ID,
        "environment": "wordle",
        "environment_args": {},
        "model": {
            "id": "mtrl/tiny-qwen2",
            "s3_uri": f"s3://{BUCKET}/models/tiny-qwen2/",
            "sha256": hashlib.sha256(sums.encode()).hexdigest(),
            "hub_downloads": False,
        },
        "lora_rank": lora_rank,
        "group_size": 4,
        "prompts_per_step": 2,
        "steps": steps,
        "max_prompt_length": 1024,
        "max_response_length": 2048,
        "hyperparameters": {"learning_rate": 1e-5},
        "nnodes": 1,
        "dataset_uri": f"s3://{BUCKET}/runs/{RUN_ID}/data/train.jsonl",
        "eval_dataset_uri": f"s3://{BUCKET}/runs/{RUN_ID}/data/eval.jsonl",
        "baseline_evaluation": True,
        "output_uri": f"s3://{BUCKET}/runs/{RUN_ID}/",
        "episode_timeout_s": 300,
    }


def up_to_the_trainer_start(document: dict[str, Any], store: LocalBucket) -> dict[str, Any]:
    """Everything the trainer does before verl starts, checked: what a machine without a GPU can prove."""
    import torch
    from hydra.utils import get_class
    from omegaconf import OmegaConf
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase

    from mtrl.backends.verl import train

    launch = train.prepare_launch(document, store, gpus_per_node=1)
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


def train_steps(document: dict[str, Any], store: LocalBucket, run_config: Path) -> tuple[int, list[dict[str, Any]]]:
    from mtrl.backends.verl import train

    tee = Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        code = train.main(["--run-config", str(run_config), "--gpus-per-node", "1"], s3=store)
    steps = []
    for line in tee.lines:
        parsed = train.parse_step_line(line)
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
        report["before_trainer_start"] = up_to_the_trainer_start(document, store)
    except Exception as error:  # the report says what failed, the exit code says that it did
        report["error"] = f"{type(error).__name__}: {error}"
        return _finish(report, options.json, EXIT_FAILED)
    report["prepare_seconds"] = round(time.perf_counter() - started, 1)
    if not torch.cuda.is_available():
        report["needs_gpu"] = (
            "no CUDA device here: everything up to the trainer's start passed; the GRPO steps need one GPU (exit 3)"
        )
        return _finish(report, options.json, EXIT_NEEDS_GPU)
    report["gpu_name"] = torch.cuda.get_device_name(0)
    started = time.perf_counter()
    code, steps = train_steps(document, store, run_config)
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
