"""The verl device check's path on a machine without a GPU (benchmarks/device/verl_two_steps.py), in .venv-verl.

It must run everything up to the trainer's start for real — the tiny model made from a config and loaded back from
its checksummed copy, the wordle rows converted, verl's trainer config composed with the run's real overrides, the
agent loop loaded from the registry file as verl loads it — then say plainly that it needs a GPU, with exit code 3.
In CI (CI=true) a missing .venv-verl fails this test; elsewhere it is skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from benchmarks.device import verl_two_steps as check
from mtrl.backends.verl import train

ROOT = Path(__file__).resolve().parents[3]
VERL_PYTHON = ROOT / ".venv-verl" / "bin" / "python"


def run_check(*args: str) -> subprocess.CompletedProcess[str]:
    if not VERL_PYTHON.exists():
        if os.environ.get("CI"):
            pytest.fail(".venv-verl is missing; CI never skips it (make verl)")
        pytest.skip(".venv-verl is missing: make verl")
    return subprocess.run(
        [str(VERL_PYTHON), "-m", "benchmarks.device.verl_two_steps", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_without_a_gpu_it_runs_up_to_the_trainer_start_and_says_it_needs_one(tmp_path: Path) -> None:
    completed = run_check("--work", str(tmp_path), "--json")
    assert completed.returncode == 3, completed.stdout[-2000:] + completed.stderr[-3000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["gpu"] is False
    assert "need one GPU" in report["needs_gpu"]
    assert "error" not in report
    before = report["before_trainer_start"]
    assert (before["train_rows"], before["eval_rows"]) == (8, 2)
    assert before["agent_loop"] == "mtrl.backends.verl.agent_loop.MtrlAgentLoop"
    assert (before["rollout_engine"], before["batch_prompts"], before["group_size"]) == ("vllm", 2, 4)
    assert before["val_before_train"] is True
    # The model verl would load is the verified copy, and it runs (its logits cover the tokenizer's vocabulary).
    assert Path(before["model_path"]).is_relative_to(tmp_path)
    assert (Path(before["model_path"]) / "model.safetensors").is_file()
    assert before["logits_shape"][::2] == [1, 261]
    assert report["model_parameters"] > 100_000
    # Nothing was trained: no progress file in the run's (local) bucket.
    assert not list((tmp_path / "bucket").rglob("progress.json"))


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
