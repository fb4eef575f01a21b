"""The verl trainer's entry point in the image, on CPU: dataset conversion, the model's verified copy, the progress
and training-health files it writes after each step, and a whole run around a stand-in trainer (S3 on moto).
That verl's own config accepts the overrides is checked in .venv-verl (tests/contract/test_verl_agent_loop.py)."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pandas as pd
import pytest
from moto import mock_aws

from mtrl.backends.verl import train
from mtrl.health.signals import parse_signals

ROOT = Path(__file__).resolve().parents[4]
BUCKET = "mtrl-data"
SAMPLE = (ROOT / "environments" / "wordle" / "sample" / "train.jsonl").read_text().splitlines()[:3]
WEIGHTS = {"config.json": b'{"model_type": "qwen2"}', "model.safetensors": b"\x00" * 64}


@pytest.fixture
def s3() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        client.put_object(Bucket=BUCKET, Key="runs/r1/data/train.jsonl", Body="\n".join(SAMPLE).encode())
        sums = "".join(f"{hashlib.sha256(body).hexdigest()}  {name}\n" for name, body in WEIGHTS.items()).encode()
        client.put_object(Bucket=BUCKET, Key="models/q/SHA256SUMS", Body=sums)
        for name, body in WEIGHTS.items():
            client.put_object(Bucket=BUCKET, Key=f"models/q/{name}", Body=body)
        client.sums_sha256 = hashlib.sha256(sums).hexdigest()  # type: ignore[attr-defined]
        yield client


def document(s3: Any, **model: Any) -> dict[str, Any]:
    return {
        "run_id": "r1",
        "environment": "wordle",
        "environment_args": {},
        "model": model
        or {"id": "Qwen/Qwen2.5-0.5B-Instruct", "s3_uri": f"s3://{BUCKET}/models/q/", "sha256": s3.sums_sha256},
        "lora_rank": 16,
        "group_size": 4,
        "steps": 3,
        "max_prompt_length": 512,
        "max_response_length": 1024,
        "hyperparameters": {"learning_rate": 1e-5},
        "nnodes": 2,
        "dataset_uri": f"s3://{BUCKET}/runs/r1/data/train.jsonl",
        "eval_dataset_uri": None,
        "output_uri": f"s3://{BUCKET}/runs/r1/",
    }


def test_rows_choose_the_mtrl_agent_loop_and_carry_the_task() -> None:
    rows = train.verl_rows(SAMPLE, env_id="wordle", env_args={"verbose": False})
    first = json.loads(SAMPLE[0])
    assert len(rows) == 3
    assert rows[0]["agent_name"] == "mtrl"
    extra = rows[0]["extra_info"]
    assert (extra["index"], extra["row_id"], extra["env_id"]) == (0, first["id"], "wordle")
    assert json.loads(extra["task_json"]) == first["metadata"]
    assert json.loads(extra["env_args_json"]) == {"verbose": False}


def test_the_overrides_train_grpo_with_the_mtrl_loop_and_the_runs_plan(s3: Any, tmp_path: Path) -> None:
    chosen = train.overrides(
        document(s3),
        model_path="/m",
        train_file=tmp_path / "t.parquet",
        val_file=None,
        agent_config=tmp_path / "a.yaml",
        local_dir=tmp_path / "c",
        gpus_per_node=8,
    )
    values = dict(item.split("=", 1) for item in chosen)
    assert values["algorithm.adv_estimator"] == "grpo"
    assert values["actor_rollout_ref.rollout.agent.default_agent_loop"] == "mtrl"
    assert values["actor_rollout_ref.rollout.n"] == "4"
    assert values["actor_rollout_ref.model.lora_rank"] == "16"
    assert values["trainer.total_training_steps"] == "3"
    assert values["trainer.nnodes"] == "2"  # workers only: the head holds no GPU
    assert values["actor_rollout_ref.actor.optim.lr"] == "1e-05"
    assert values["+mtrl.run_id"] == "r1"
    assert json.loads(train.agent_loop_registry()) == [{"name": "mtrl", "_target_": train.AGENT_LOOP_CLASS}]


def test_the_models_copy_is_verified_file_by_file(s3: Any, tmp_path: Path) -> None:
    path = Path(train.fetch_model(document(s3), s3, tmp_path))
    assert {p.name: p.read_bytes() for p in path.iterdir()} == WEIGHTS
    s3.put_object(Bucket=BUCKET, Key="models/q/model.safetensors", Body=b"\x01" * 64)  # tampered
    with pytest.raises(train.TrainError, match=r"run r1: .*model.safetensors does not match"):
        train.fetch_model(document(s3), s3, tmp_path / "again")
    with pytest.raises(train.TrainError, match="SHA256SUMS does not match"):
        train.fetch_model(document(s3, id="m", s3_uri=f"s3://{BUCKET}/models/q/", sha256="0" * 64), s3, tmp_path)
    with pytest.raises(train.TrainError, match="Hub downloads are off"):
        train.fetch_model(document(s3, id="m", hub_downloads=False), s3, tmp_path)


def test_step_lines_become_progress_and_training_health_rows(s3: Any) -> None:
    progress = train.Progress(s3, f"s3://{BUCKET}/runs/r1/", planned_steps=3, group_size=4)
    progress.start()
    lines = [
        "(TaskRunner pid=1) step:1 - critic/score/mean:0.25 - actor/entropy:1.5 - response_length/clip_ratio:0.0\n",
        "unrelated output\n",
        "step:2 - critic/score/mean:0.5 - actor/grad_norm:3.0 - actor/kl_loss:0.01 - num_turns/mean:4.0\n",
    ]
    assert list(train.follow(lines, progress)) == lines
    body = s3.get_object(Bucket=BUCKET, Key="runs/r1/signals.jsonl")["Body"].read().decode()
    signals = parse_signals(body)
    assert signals.header.planned_steps == 3
    assert [(row.step, row.reward_mean) for row in signals.rows] == [(1, 0.25), (2, 0.5)]
    assert (signals.rows[0].entropy, signals.rows[1].grad_norm, signals.rows[1].mean_turns) == (1.5, 3.0, 4.0)
    assert json.loads(s3.get_object(Bucket=BUCKET, Key="runs/r1/progress.json")["Body"].read()) == {"step": 2}
    assert train.parse_step_line("no step here") is None


def test_a_run_around_a_stand_in_trainer(s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "run.json"
    config.write_text(json.dumps(document(s3)))
    script = tmp_path / "trainer.py"
    script.write_text(
        "import sys, pathlib\n"
        "args = dict(a.split('=', 1) for a in sys.argv[1:])\n"
        "assert args['actor_rollout_ref.rollout.agent.default_agent_loop'] == 'mtrl'\n"
        "out = pathlib.Path(args['trainer.default_local_dir']) / 'global_step_3'\n"
        "out.mkdir(parents=True)\n"
        "(out / 'actor.bin').write_bytes(b'weights')\n"
        "for step in (1, 2, 3):\n"
        "    print(f'step:{step} - critic/score/mean:{step / 10}', flush=True)\n"
    )
    monkeypatch.setenv("MTRL_VERL_TRAINER", f"{sys.executable} {script}")
    monkeypatch.setattr(train, "WORK_DIR", tmp_path / "work")
    assert train.main(["--run-config", str(config)], s3=s3) == 0
    rows = pd.read_parquet(tmp_path / "work" / "r1" / "data" / "train.parquet")
    assert list(rows["agent_name"]) == ["mtrl"] * 3
    # The tasks read back exactly as validated (no keys merged in from other rows).
    assert [json.loads(extra["task_json"]) for extra in rows["extra_info"]] == [
        json.loads(line)["metadata"] for line in SAMPLE
    ]
    assert json.loads(s3.get_object(Bucket=BUCKET, Key="runs/r1/progress.json")["Body"].read()) == {"step": 3}
    copied = s3.get_object(Bucket=BUCKET, Key="runs/r1/output/checkpoints/global_step_3/actor.bin")
    assert copied["Body"].read() == b"weights"
