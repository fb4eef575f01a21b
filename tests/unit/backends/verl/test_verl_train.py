"""The verl trainer's entry point in the image, on CPU: dataset conversion, the model's verified copy, the progress
and training-health files it writes after each step, and a whole run around a stand-in trainer (S3 on moto).
That verl's own config accepts the overrides is checked in .venv-verl (tests/contract/test_verl_agent_loop.py)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import boto3
import pandas as pd
import pytest

from mtrl.backends._aws import AwsClients
from mtrl.backends.verl import progress as verl_progress
from mtrl.backends.verl import train
from mtrl.backends.verl.adapter import VerlAdapter
from mtrl.backends.verl.config import plan_for
from mtrl.backends.verl.evaluation import evaluation_document, pipeline_figures, validation_figures
from mtrl.backends.verl.rayjob import render
from mtrl.contracts.backend import BackendError, RunContext
from mtrl.contracts.errors import ConfigurationError
from mtrl.health.signals import parse_signals
from mtrl.runs.report import baseline_comparison
from tests.unit.backends.verl.verl_support import run_context, run_settings

ROOT = Path(__file__).resolve().parents[4]
BUCKET = "mtrl-data"
SAMPLE = (ROOT / "environments" / "wordle" / "sample" / "train.jsonl").read_text().splitlines()[:3]
WEIGHTS = {"config.json": b'{"model_type": "qwen2"}', "model.safetensors": b"\x00" * 64}


# What verl leaves when training ends (trainer.default_local_dir/global_step_<n>/actor), for the stand-in trainers.
WRITE_CHECKPOINT = (
    "import pathlib as _p, sys as _s\n"
    "_args = dict(a.split('=', 1) for a in _s.argv[1:] if '=' in a)\n"
    "_actor = _p.Path(_args['trainer.default_local_dir']) / 'global_step_3' / 'actor'\n"
    "_actor.mkdir(parents=True, exist_ok=True)\n"
    "(_actor / 'model_world_size_1_rank_0.pt').write_bytes(b'weights')\n"
)


@pytest.fixture(autouse=True)
def stand_in_merger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """verl's model merger as its CLI is called (merge --backend fsdp --local_dir ACTOR --target_dir DIR)."""
    script = tmp_path / "merger.py"
    script.write_text(
        "import sys, pathlib\n"
        "args = sys.argv[1:]\n"
        "assert args[:3] == ['merge', '--backend', 'fsdp'], args\n"
        "source = pathlib.Path(args[args.index('--local_dir') + 1])\n"
        "assert (source / 'model_world_size_1_rank_0.pt').is_file(), source\n"
        "target = pathlib.Path(args[args.index('--target_dir') + 1])\n"
        "(target / 'lora_adapter').mkdir(parents=True)\n"
        "(target / 'model.safetensors').write_bytes(b'merged')\n"
        "(target / 'lora_adapter' / 'adapter_model.safetensors').write_bytes(b'adapter')\n"
    )
    monkeypatch.setenv("MTRL_VERL_MERGER", f"{sys.executable} {script}")
    return script


@pytest.fixture
def s3(mocked_aws: None) -> Any:
    client = boto3.client("s3", region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    client.put_object(Bucket=BUCKET, Key="runs/r1/data/train.jsonl", Body="\n".join(SAMPLE).encode())
    sums = "".join(f"{hashlib.sha256(body).hexdigest()}  {name}\n" for name, body in WEIGHTS.items()).encode()
    client.put_object(Bucket=BUCKET, Key="models/q/SHA256SUMS", Body=sums)
    for name, body in WEIGHTS.items():
        client.put_object(Bucket=BUCKET, Key=f"models/q/{name}", Body=body)
    client.sums_sha256 = hashlib.sha256(sums).hexdigest()  # type: ignore[attr-defined]
    return client


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


def test_a_step_takes_at_most_the_datasets_prompts_and_the_epochs_cover_the_planned_steps(
    s3: Any, tmp_path: Path
) -> None:
    def chosen(rows: int, **changes: Any) -> dict[str, str]:
        items = train.overrides(
            {**document(s3), **changes},
            model_path="/m",
            train_file=tmp_path / "t.parquet",
            val_file=None,
            agent_config=tmp_path / "a.yaml",
            local_dir=tmp_path / "c",
            gpus_per_node=1,
            train_rows=rows,
        )
        return dict(item.split("=", 1) for item in items)

    few = chosen(3, steps=10)  # 3 rows: one batch of 3 per epoch, 10 epochs for 10 steps
    assert (few["data.train_batch_size"], few["actor_rollout_ref.actor.ppo_mini_batch_size"]) == ("3", "3")
    assert few["trainer.total_epochs"] == "10"
    many = chosen(1000, steps=100)  # 16 prompts a step, 62 full batches an epoch: 2 epochs
    assert (many["data.train_batch_size"], many["trainer.total_epochs"]) == (str(train.PROMPTS_PER_STEP), "2")
    assert chosen(1000, prompts_per_step=4)["data.train_batch_size"] == "4"
    # verl has no default for the engine, and its default tensor parallelism (2) does not fit a one-GPU node.
    assert few["actor_rollout_ref.rollout.name"] == "vllm"
    assert few["actor_rollout_ref.rollout.tensor_model_parallel_size"] == "1"
    assert few["actor_rollout_ref.actor.use_dynamic_bsz"] == "true"
    assert int(few["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"]) >= 512 + 1024


def test_empty_training_rows_are_refused_naming_the_run(s3: Any, tmp_path: Path) -> None:
    s3.put_object(Bucket=BUCKET, Key="runs/r1/data/train.jsonl", Body=b"\n\n")
    with pytest.raises(train.TrainError, match=r"run r1: the training rows .* are empty"):
        train.prepare(document(s3), s3, tmp_path)


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
    progress = verl_progress.Progress(s3, f"s3://{BUCKET}/runs/r1/", planned_steps=3, group_size=4)
    progress.start()
    lines = [
        "(TaskRunner pid=1) step:1 - critic/score/mean:0.25 - actor/entropy:1.5 - response_length/clip_ratio:0.0\n",
        "unrelated output\n",
        "step:2 - critic/score/mean:0.5 - actor/grad_norm:3.0 - actor/kl_loss:0.01 - num_turns/mean:4.0\n",
    ]
    assert list(verl_progress.follow(lines, progress)) == lines
    body = s3.get_object(Bucket=BUCKET, Key="runs/r1/signals.jsonl")["Body"].read().decode()
    signals = parse_signals(body)
    assert signals.header.planned_steps == 3
    assert [(row.step, row.reward_mean) for row in signals.rows] == [(1, 0.25), (2, 0.5)]
    assert (signals.rows[0].entropy, signals.rows[1].grad_norm, signals.rows[1].mean_turns) == (1.5, 3.0, 4.0)
    assert json.loads(s3.get_object(Bucket=BUCKET, Key="runs/r1/progress.json")["Body"].read()) == {"step": 2}
    assert verl_progress.parse_step_line("no step here") is None


def test_a_run_around_a_stand_in_trainer(s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "run.json"
    config.write_text(json.dumps(document(s3)))
    script = tmp_path / "trainer.py"
    script.write_text(
        "import sys, pathlib\n"
        "args = dict(a.split('=', 1) for a in sys.argv[1:])\n"
        "assert args['actor_rollout_ref.rollout.agent.default_agent_loop'] == 'mtrl'\n"
        "for step in (1, 2, 3):\n"
        "    print(f'step:{step} - critic/score/mean:{step / 10}', flush=True)\n" + WRITE_CHECKPOINT
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
    copied = s3.get_object(
        Bucket=BUCKET, Key="runs/r1/output/checkpoints/global_step_3/actor/model_world_size_1_rank_0.pt"
    )
    assert copied["Body"].read() == b"weights"
    # The deliverable: the merged Hugging Face model, and the LoRA adapter beside it.
    merged = s3.get_object(Bucket=BUCKET, Key="runs/r1/output/huggingface/model.safetensors")["Body"].read()
    assert merged == b"merged"
    adapter = s3.get_object(Bucket=BUCKET, Key="runs/r1/output/huggingface/lora_adapter/adapter_model.safetensors")
    assert adapter["Body"].read() == b"adapter"


def test_another_node_gets_everything_it_reads_from_s3_and_exports_from_s3(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No pod sees another's disk (issue 35, defect 2): what the head prepares is published under the run's prefix; a
    node with an empty disk stages the inputs and the verified model from S3 alone; the checkpoints a worker wrote
    reach S3, and an export on yet another empty node merges them from there."""
    run = document(s3)
    monkeypatch.setattr(train, "WORK_DIR", tmp_path / "head")
    train.prepare(run, s3, train.run_work_dir(run))
    train.publish_inputs(s3, run, train.run_work_dir(run))
    inputs = {item["Key"] for item in s3.list_objects_v2(Bucket=BUCKET, Prefix="runs/r1/verl-inputs/")["Contents"]}
    assert inputs == {"runs/r1/verl-inputs/data/train.parquet", "runs/r1/verl-inputs/agent_loops.yaml"}

    monkeypatch.setattr(train, "WORK_DIR", tmp_path / "worker")  # the GPU worker's own, empty disk
    staged = train.stage_node(run, s3)
    work = tmp_path / "worker" / "r1"
    assert staged["model_path"] == str(work / "model")
    assert (work / "model" / "model.safetensors").read_bytes() == WEIGHTS["model.safetensors"]
    assert (work / "agent_loops.yaml").read_text() == train.agent_loop_registry()
    assert len(pd.read_parquet(work / "data" / "train.parquet")) == 3
    # The worker's checkpoint (its ranks' shards) leaves through S3 ...
    actor = work / "checkpoints" / "global_step_3" / "actor"
    actor.mkdir(parents=True)
    (actor / "model_world_size_1_rank_0.pt").write_bytes(b"weights")
    assert train.upload_node_checkpoints(run, s3) == 1

    monkeypatch.setattr(train, "WORK_DIR", tmp_path / "exporter")  # ... and is merged on a node that never held it
    assert train.export_node(run, s3) == (0, None)
    merged = s3.get_object(Bucket=BUCKET, Key="runs/r1/output/huggingface/model.safetensors")["Body"].read()
    assert merged == b"merged"


def test_a_run_whose_model_cannot_be_exported_fails(s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "run.json"
    config.write_text(json.dumps(document(s3)))
    script = tmp_path / "trainer.py"
    script.write_text("for step in (1, 2, 3):\n    print(f'step:{step} - critic/score/mean:0.5', flush=True)\n")
    monkeypatch.setenv("MTRL_VERL_TRAINER", f"{sys.executable} {script}")
    monkeypatch.setattr(train, "WORK_DIR", tmp_path / "work")
    assert train.main(["--run-config", str(config)], s3=s3) == 1  # no checkpoint: nothing to deliver
    script.write_text(script.read_text() + WRITE_CHECKPOINT)
    monkeypatch.setenv("MTRL_VERL_MERGER", f"{sys.executable} -c 'import sys; sys.exit(3)'")
    assert train.main(["--run-config", str(config)], s3=s3) == 3  # the merger failed
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="runs/r1/output/huggingface/")
    assert listed["KeyCount"] == 0


# verl's console lines of a validation (RayPPOTrainer._val_metrics_update + LocalLogger; the contract test
# tests/contract/test_verl_agent_loop.py makes them with verl's own code): before training at step 0, then merged into
# the last step's line.
# NumPy 2 scalars print as np.float64(...) (pprint.pformat), Python floats plainly: verl's lines mix both.
BASELINE_LINE = (
    "step:0 - val-aux/mtrl/wordle/turns/mean@1:np.float64(6.0) - val-core/mtrl/wordle/reward/mean@1:np.float64(-0.5) - "
    "val-aux/mtrl/wordle/success/mean@1:np.float64(0.0) - val-aux/mtrl/wordle/evaluation/mean@1:np.float64(0.0) - "
    "val-aux/num_turns/min:np.int64(12) - val-aux/num_turns/mean:np.float64(12.0)\n"
)
AFTER_LINE = (
    "step:3 - critic/score/mean:0.3 - val-core/mtrl/wordle/reward/mean@1:np.float64(0.75) - "
    "val-aux/mtrl/wordle/success/mean@1:np.float64(0.5) - val-aux/mtrl/wordle/evaluation/mean@1:0.5\n"
)


def test_numpy_scalars_in_verls_lines_are_read() -> None:
    parsed = verl_progress.parse_step_line(
        "step:2 - critic/score/mean:np.float64(0.25) - a:np.int64(3) - b:np.float32(nan) - c:np.str_('x') - d:1e-3"
    )
    assert parsed is not None
    step, metrics = parsed
    assert (step, metrics["critic/score/mean"], metrics["a"], metrics["d"]) == (2, 0.25, 3.0, 0.001)
    assert metrics["b"] != metrics["b"]  # NaN
    assert "c" not in metrics


def test_with_held_out_rows_verl_validates_them_before_and_after_training(s3: Any, tmp_path: Path) -> None:
    common = {
        "model_path": "/m",
        "train_file": tmp_path / "t.parquet",
        "agent_config": tmp_path / "a.yaml",
        "local_dir": tmp_path / "c",
        "gpus_per_node": 1,
    }
    with_baseline = dict(
        item.split("=", 1)
        for item in train.overrides(
            {**document(s3), "baseline_evaluation": True}, val_file=tmp_path / "e.parquet", **common
        )
    )
    assert with_baseline["data.val_files"] == str(tmp_path / "e.parquet")
    assert with_baseline["trainer.val_before_train"] == "true"
    assert with_baseline["trainer.test_freq"] == "3"  # the last step
    without_baseline = dict(
        item.split("=", 1) for item in train.overrides(document(s3), val_file=tmp_path / "e.parquet", **common)
    )
    assert (without_baseline["trainer.val_before_train"], without_baseline["trainer.test_freq"]) == ("false", "3")
    # No held-out rows: verl's validation set is the training file and it is never played.
    no_rows = dict(
        item.split("=", 1)
        for item in train.overrides({**document(s3), "baseline_evaluation": True}, val_file=None, **common)
    )
    assert (no_rows["trainer.val_before_train"], no_rows["trainer.test_freq"]) == ("false", "-1")


def test_validation_lines_become_the_evaluation_and_the_baseline_is_no_training_step(s3: Any) -> None:
    progress = verl_progress.Progress(s3, f"s3://{BUCKET}/runs/r1/", planned_steps=3, group_size=4, eval_tasks=2)
    progress.start()
    list(verl_progress.follow([BASELINE_LINE], progress))
    # The baseline trained nothing: no progress, no signal row.
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket=BUCKET, Key="runs/r1/progress.json")
    assert parse_signals(s3.get_object(Bucket=BUCKET, Key="runs/r1/signals.jsonl")["Body"].read().decode()).rows == ()
    evaluation = json.loads(s3.get_object(Bucket=BUCKET, Key="runs/r1/evaluation.json")["Body"].read())
    assert evaluation == {
        "tasks": 2,
        "measure": "evaluation",
        "before": {"reward": -0.5, "success": 0.0, "evaluation": 0.0},
        "after": None,
    }
    list(verl_progress.follow(["step:1 - critic/score/mean:0.1\n", AFTER_LINE], progress))
    evaluation = json.loads(s3.get_object(Bucket=BUCKET, Key="runs/r1/evaluation.json")["Body"].read())
    assert evaluation["after"] == {"reward": 0.75, "success": 0.5, "evaluation": 0.5}
    assert evaluation["before"]["reward"] == -0.5
    assert json.loads(s3.get_object(Bucket=BUCKET, Key="runs/r1/progress.json")["Body"].read()) == {"step": 3}


def test_an_environment_without_evaluation_is_scored_by_success_and_says_so() -> None:
    # The agent loop reports NaN for `evaluation` when the environment declares none; verl's mean is NaN too.
    figures = validation_figures(
        {
            "val-core/mtrl/x/reward/mean@4": 0.2,
            "val-aux/mtrl/x/success/mean@4": 0.25,
            "val-aux/mtrl/x/evaluation/mean@4": float("nan"),
        }
    )
    assert figures == {"reward": 0.2, "success": 0.25}
    document = evaluation_document(tasks=4, before=None, after=figures)
    assert document["measure"] == "success"
    assert pipeline_figures(document) == {
        "heldout_tasks": 4.0,
        "heldout_evaluation_after": 0.25,
        "heldout_success_after": 0.25,
        "heldout_reward_after": 0.2,
    }
    # Several sample counts (val_kwargs.n > 1): the mean over all of them (the largest N) is the figure.
    assert validation_figures({"val-core/mtrl/x/reward/mean@2": 0.1, "val-core/mtrl/x/reward/mean@8": 0.4}) == {
        "reward": 0.4
    }
    # Training lines and other data sources are no evaluation; a component named like a field is not one.
    assert validation_figures({"critic/score/mean": 1.0}) is None
    assert validation_figures({"val-core/other/reward/mean@1": 1.0}) is None
    assert validation_figures({"val-aux/mtrl/x/component/reward/mean@1": 1.0}) is None


def test_a_run_with_held_out_rows_reports_its_evaluation_through_the_adapter(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3.put_object(Bucket=BUCKET, Key="runs/r1/data/eval.jsonl", Body="\n".join(SAMPLE[:2]).encode())
    config = tmp_path / "run.json"
    config.write_text(
        json.dumps(
            {**document(s3), "eval_dataset_uri": f"s3://{BUCKET}/runs/r1/data/eval.jsonl", "baseline_evaluation": True}
        )
    )
    script = tmp_path / "trainer.py"
    script.write_text(
        "import sys\n"
        "args = dict(a.split('=', 1) for a in sys.argv[1:])\n"
        "assert args['trainer.val_before_train'] == 'true', args\n"
        "assert args['data.val_files'].endswith('eval.parquet'), args\n"
        f"print({BASELINE_LINE!r}, end='', flush=True)\n"
        "print('step:1 - critic/score/mean:0.1', flush=True)\n"
        "print('step:2 - critic/score/mean:0.2', flush=True)\n"
        f"print({AFTER_LINE!r}, end='', flush=True)\n" + WRITE_CHECKPOINT
    )
    monkeypatch.setenv("MTRL_VERL_TRAINER", f"{sys.executable} {script}")
    monkeypatch.setattr(train, "WORK_DIR", tmp_path / "work")
    assert train.main(["--run-config", str(config)], s3=s3) == 0
    held_out = pd.read_parquet(tmp_path / "work" / "r1" / "data" / "eval.parquet")
    assert list(held_out["agent_name"]) == ["mtrl", "mtrl"]  # the same agent loop as training

    settings = run_settings({}, {"baseline_evaluation": True, "eval_split": 0.2})
    assert settings["baseline_evaluation"] is True
    run = RunContext("r1", settings, f"s3://{BUCKET}/runs/r1/data/train.jsonl", None, f"s3://{BUCKET}/runs/r1/")
    adapter = VerlAdapter(AwsClients(boto3.Session(region_name="us-east-1")))
    assert adapter.evaluate(run) == {
        "heldout_tasks": 2.0,
        "heldout_evaluation_before": 0.0,
        "heldout_success_before": 0.0,
        "heldout_reward_before": -0.5,
        "heldout_evaluation_after": 0.5,
        "heldout_success_after": 0.5,
        "heldout_reward_after": 0.75,
    }
    assert adapter.evaluation_settings(run) == {"evaluation_measure": "evaluation"}
    # The summary's comparison reads these names (the local backend's): baseline next to after training.
    comparison = baseline_comparison({"settings": {**settings, "backend": "verl"}, "evaluation": adapter.evaluate(run)})
    assert comparison is not None
    assert comparison["metrics"]["heldout_evaluation"] == {"baseline": 0.0, "after_training": 0.5}
    assert comparison["metrics"]["heldout_reward"] == {"baseline": -0.5, "after_training": 0.75}
    assert "val_before_train" in comparison["how"]


def test_the_adapter_says_plainly_when_there_is_no_evaluation(s3: Any) -> None:
    settings = run_settings()
    run = RunContext("r1", settings, f"s3://{BUCKET}/runs/r1/data/train.jsonl", None, f"s3://{BUCKET}/runs/r1/")
    adapter = VerlAdapter(AwsClients(boto3.Session(region_name="us-east-1")))
    with pytest.raises(BackendError, match=r"run r1: the trainer wrote no held-out evaluation"):
        adapter.evaluate(run)
    assert adapter.evaluation_settings(run) == {}
    for body in (b"not json", b"[]", b'{"tasks": 2, "measure": "success", "after": {"reward": 1.0}}'):
        s3.put_object(Bucket=BUCKET, Key="runs/r1/evaluation.json", Body=body)
        with pytest.raises(BackendError, match=r"run r1: .*evaluation"):
            adapter.evaluate(run)
    s3.put_object(Bucket=BUCKET, Key="runs/r1/evaluation.json", Body=b'{"tasks": 2, "measure": "success"}')
    with pytest.raises(BackendError, match="no after-training evaluation"):
        adapter.evaluate(run)


def test_a_baseline_needs_held_out_rows_on_verl() -> None:
    with pytest.raises(ConfigurationError, match="'baseline_evaluation': backend 'verl' evaluates the base model"):
        run_settings({}, {"baseline_evaluation": True})
    settings = run_settings({}, {"baseline_evaluation": True, "eval_split": 0.2})
    config_map, _ = render(plan_for(settings), run_context(settings))
    assert json.loads(config_map["data"]["run.json"])["baseline_evaluation"] is True


MLFLOW_APP = "arn:aws:sagemaker:us-east-1:111122223333:mlflow-app/app-ABCDEF123456"


def test_trainer_metrics_go_to_the_deployments_mlflow_app(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The deployment ships its MLflow app's ARN to every backend; the RayJob's run document carries it.
    settings = {**run_settings(), "serverless_mlflow_app_arn": MLFLOW_APP}
    config_map, _ = render(plan_for(settings), run_context(settings))
    assert json.loads(config_map["data"]["run.json"])["mlflow_tracking_uri"] == MLFLOW_APP
    settings_without = {**run_settings(), "serverless_mlflow_app_arn": None}
    config_map, _ = render(plan_for(settings_without), run_context(settings_without))
    assert json.loads(config_map["data"]["run.json"])["mlflow_tracking_uri"] is None

    # verl's MLflow logger is on, next to the console log the progress files come from, and it finds the app in
    # MLFLOW_TRACKING_URI (verl/utils/tracking.py); the console log still yields the steps.
    config = tmp_path / "run.json"
    config.write_text(json.dumps({**document(s3), "mlflow_tracking_uri": MLFLOW_APP}))
    script = tmp_path / "trainer.py"
    script.write_text(
        "import os, sys\n"
        "args = dict(a.split('=', 1) for a in sys.argv[1:])\n"
        "assert args['trainer.logger'] == '[console,mlflow]', args['trainer.logger']\n"
        f"assert os.environ['MLFLOW_TRACKING_URI'] == {MLFLOW_APP!r}\n"
        "for step in (1, 2, 3):\n"
        "    print(f'step:{step} - critic/score/mean:np.float64({step / 10})', flush=True)\n" + WRITE_CHECKPOINT
    )
    monkeypatch.setenv("MTRL_VERL_TRAINER", f"{sys.executable} {script}")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setattr(train, "WORK_DIR", tmp_path / "work")
    assert train.main(["--run-config", str(config)], s3=s3) == 0
    assert json.loads(s3.get_object(Bucket=BUCKET, Key="runs/r1/progress.json")["Body"].read()) == {"step": 3}
    # Without an app: the console only, and no tracking URI invented.
    assert train.trainer_environment(document(s3)).get("MLFLOW_TRACKING_URI") is None
    plain = train.overrides(
        document(s3),
        model_path="/m",
        train_file=tmp_path / "t.parquet",
        val_file=None,
        agent_config=tmp_path / "a.yaml",
        local_dir=tmp_path / "c",
        gpus_per_node=1,
    )
    assert "trainer.logger=[console]" in plain


def test_an_offline_render_names_the_operators_mlflow_app() -> None:
    settings = run_settings({"serverless_mlflow_app_arn": MLFLOW_APP})
    config_map, _ = render(plan_for(settings), run_context(settings))
    assert json.loads(config_map["data"]["run.json"])["mlflow_tracking_uri"] == MLFLOW_APP
