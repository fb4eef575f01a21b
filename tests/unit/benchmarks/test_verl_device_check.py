"""The verl device check (benchmarks/device/verl_two_steps.py): the checks before the trainer, in-process.

Its path on a machine without a GPU, in .venv-verl (everything up to the trainer's start for real, then exit code 3),
is tests/contract/test_verl_agent_loop.py's
``test_the_device_check_without_a_gpu_runs_up_to_the_trainer_start_and_says_it_needs_one``: a fork of the .venv-verl
interpreter that module's runs share, so torch, transformers and verl are imported once for all of them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.device import verl_two_steps as check
from mtrl.backends.verl import train


def test_a_tampered_model_copy_stops_it_before_the_trainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # In-process and without verl (the checks before the trainer are mtrl's): the staged copy is verified file by
    # file, so a model file changed after its SHA256SUMS entry was written stops the run, naming the file.
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text('{"model_type": "qwen2"}')
    (model_dir / "model.safetensors").write_bytes(b"\x00" * 32)
    store = check.LocalBucket(tmp_path / "bucket")
    document = check.stage_run(store, model_dir, steps=2, lora_rank=8)
    monkeypatch.setattr(train, "WORK_DIR", tmp_path / "trainer")
    launch = train.prepare_launch(document, store, gpus_per_node=1)
    assert (launch.prepared.train_rows, launch.prepared.eval_tasks) == (check.TRAIN_ROWS, check.EVAL_ROWS)
    assert (Path(launch.model_path) / "model.safetensors").read_bytes() == b"\x00" * 32
    store.put_object(Bucket=check.BUCKET, Key="models/tiny-qwen2/config.json", Body=b"{}")
    with pytest.raises(train.TrainError, match=r"config.json does not match its SHA256SUMS entry"):
        train.prepare_launch(document, store, gpus_per_node=1)
    # The local bucket keeps every key inside its directory.
    with pytest.raises(ValueError, match="escapes the bucket"):
        store.get_object(Bucket=check.BUCKET, Key="../../outside")


def test_it_runs_the_entrypoint_mtrl_render_renders_with_the_rendered_run_document(tmp_path: Path) -> None:
    # issue 35 "What to build" 4: the device check runs the RayJob's own entrypoint and the ConfigMap's document, not a
    # hand-built trainer; only the mounted path becomes the local copy.
    document, entrypoint = check.rendered_run("a" * 64, steps=2, lora_rank=8)
    assert entrypoint == "python -m mtrl.backends.verl.train --run-config /etc/mtrl/run.json"
    assert check.entrypoint_arguments(entrypoint, tmp_path / "run.json") == ["--run-config", str(tmp_path / "run.json")]
    assert (document["run_id"], document["environment"], document["steps"], document["lora_rank"]) == (
        check.RUN_ID,
        "wordle",
        2,
        8,
    )
    assert document["model"]["s3_uri"] == f"s3://{check.BUCKET}/models/tiny-qwen2/"
    assert document["gpus_per_node"] == 1  # the rendered group's node (ml.g5.2xlarge) has one GPU
    assert document["eval_dataset_uri"] == f"s3://{check.BUCKET}/runs/{check.RUN_ID}/data/eval.jsonl"
    with pytest.raises(RuntimeError, match=r"does not run mtrl\.backends\.verl\.train"):
        check.entrypoint_arguments("python -m something.else --run-config /etc/mtrl/run.json", tmp_path / "r")


@pytest.mark.parametrize(
    ("gpu", "missing", "code", "named"),
    [
        (True, ["ray", "vllm"], check.EXIT_NOT_INSTALLED, "ray, vllm not installed"),
        (True, ["vllm"], check.EXIT_NOT_INSTALLED, "vllm not installed"),
        (False, ["vllm"], check.EXIT_NEEDS_GPU, "vllm not installed"),
        (False, [], check.EXIT_NEEDS_GPU, "need one GPU"),
    ],
)
def test_without_ray_or_vllm_it_fails_loudly_naming_them(gpu: bool, missing: list[str], code: int, named: str) -> None:
    # A GPU machine with torch 2.11 + CUDA 13 but no Ray or vLLM cannot train: it must not pass (exit 0).
    verdict = check.training_verdict(gpu=gpu, missing=missing)
    assert verdict is not None
    assert verdict[0] == code
    assert named in verdict[1]
    assert check.training_verdict(gpu=True, missing=[]) is None


def test_the_modules_training_needs_are_looked_up_for_real(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "vllm" else real(name))
    assert "vllm" in check.missing_training_modules()


def test_the_local_bucket_serves_the_exports_listing(tmp_path: Path) -> None:
    """The export downloads the run's checkpoints by listing them (mtrl.backends.verl.nodes.download_tree): the
    device check's bucket pages the keys under a prefix, and only those."""
    from mtrl.backends.verl.nodes import download_tree

    store = check.LocalBucket(tmp_path / "bucket")
    for key in ("runs/r1/output/checkpoints/global_step_2/actor/a.pt", "runs/r1/output/other.json", "runs/r2/x"):
        store.put_object(Bucket="b", Key=key, Body=key.encode())
    into = tmp_path / "into"
    assert download_tree(store, "s3://b/runs/r1/output/checkpoints/", into) == 1
    assert (into / "global_step_2" / "actor" / "a.pt").read_bytes().endswith(b"a.pt")
    with pytest.raises(ValueError, match="list_objects_v2"):
        store.get_paginator("list_objects")
