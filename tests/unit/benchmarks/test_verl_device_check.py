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
