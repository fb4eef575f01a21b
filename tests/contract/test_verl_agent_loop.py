"""The verl bridge against verl's real classes on CPU (``.venv-verl``: verl 0.9.1 as locked, ``make verl``).

``python -m mtrl.backends.verl.smoke`` runs ``MtrlAgentLoop`` — a subclass of verl's ``AgentLoopBase``, built with
verl's own constructor — with a scripted server manager and a real byte-level tokenizer, then verl's own
postprocessing (``AgentLoopWorker._agent_loop_postprocess`` and ``_postprocess``). For every registered environment
the reward verl trains on (``rm_scores``, on the last response token) equals what the same actions score through the
environment directly; masks separate the model's tokens from the environment's; the turn limit and the response
length stop an episode. verl's own trainer config, validation metrics and rollout dump are checked against mtrl's
readers, and the verl device check (benchmarks/device/verl_two_steps.py) runs its no-GPU path. In CI (CI=true) a
missing .venv-verl fails these tests; elsewhere they are skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mtrl.envs.registry import list_environments, load_spec
from tests.contract.forked_runs import Run, run_forked
from tests.contract.tier import skip_or_fail

ROOT = Path(__file__).resolve().parents[2]
VERL_PYTHON = ROOT / ".venv-verl" / "bin" / "python"
ENVIRONMENTS = [env_id for env_id, _ in list_environments(include_template=True)]


# verl's heavy imports, done once by the forking parent (tests/contract/forked_runs.py); mtrl's own modules are left
# to each run, so every run imports the code under test itself.
VERL_PRELOAD = (
    "torch",
    "transformers",
    "omegaconf",
    "hydra",
    "verl.experimental.agent_loop.agent_loop",
    "verl.workers.rollout.replica",
    "verl.utils.dataset.rl_dataset",
    "verl.trainer.ppo.ray_trainer",
    "verl.utils.logger.aggregate_logger",
)
SMOKE = ("-m", "mtrl.backends.verl.smoke", "--json")
EVERY_ENVIRONMENT = (*SMOKE, *(argument for env_id in ENVIRONMENTS for argument in ("--env", env_id)), "--tasks", "2")
RESPONSE_LENGTH = (*SMOKE, "--env", "wordle", "--tasks", "1", "--response-length", "40")
# sop_support's first prompt (system prompt + a ticket with the store's policy) is longer than 512 tokens.
PROMPT_OVERFLOW = (
    *SMOKE,
    "--env",
    "sop_support",
    "--tasks",
    "2",
    "--prompt-length",
    "512",
    "--response-length",
    "8192",
)
COMPOSE = ("-m", "mtrl.backends.verl.train", "--run-config", "{run_config}", "--compose-only")
DEVICE_CHECK = ("-m", "benchmarks.device.verl_two_steps", "--json", "--work")  # + the check's working directory


def _run_in_verl(runs: dict[str, Run]) -> dict[str, subprocess.CompletedProcess[str]]:
    """Each of ``runs`` as ``python <args>`` in .venv-verl with this checkout first on the path, from one interpreter
    start (forked_runs: verl and torch import once, each run still gets its own process). A missing .venv-verl fails
    in CI and skips elsewhere."""
    if not VERL_PYTHON.exists():
        skip_or_fail(".venv-verl is missing (make verl)")
    completed = run_forked(
        VERL_PYTHON,
        list(runs.values()),
        preload=VERL_PRELOAD,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    return dict(zip(runs, completed, strict=True))


@pytest.fixture(scope="module")
def device_check_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The device check's working directory (its model, its local bucket)."""
    return tmp_path_factory.mktemp("verl-device-check")


@pytest.fixture(scope="module")
def verl_runs(
    tmp_path_factory: pytest.TempPathFactory, device_check_work: Path
) -> dict[str, subprocess.CompletedProcess[str]]:
    """Every .venv-verl run this module asserts on, from one interpreter start (not six torch + verl imports)."""
    run_config = tmp_path_factory.mktemp("verl-compose") / "run.json"
    run_config.write_text(json.dumps(RUN_DOCUMENT))
    return _run_in_verl(
        {
            "every_environment": Run(EVERY_ENVIRONMENT),
            "response_length": Run(RESPONSE_LENGTH),
            "prompt_overflow": Run(PROMPT_OVERFLOW),
            "compose": Run(tuple(arg.format(run_config=run_config) for arg in COMPOSE)),
            "validation": Run(("-c", VALIDATION_SCRIPT)),
            "dump": Run(("-c", DUMP_SCRIPT)),
            # No CUDA device, as on this machine and in CI (the CPU torch has none anyway).
            "device_check": Run(
                (*DEVICE_CHECK, str(device_check_work)),
                env={**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""},
            ),
        }
    )


def _script_report(completed: subprocess.CompletedProcess[str]) -> Any:
    """A script run in .venv-verl must succeed, and its last line of output is its JSON report."""
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def smoke(completed: subprocess.CompletedProcess[str]) -> tuple[int, dict[str, Any]]:
    assert completed.stdout, completed.stderr[-3000:]
    return completed.returncode, json.loads(completed.stdout)


@pytest.fixture(scope="module")
def every_environment_smoke(verl_runs: dict[str, subprocess.CompletedProcess[str]]) -> tuple[int, dict[str, Any]]:
    """One smoke run plays two tasks of every environment: verl and torch load once, not once per environment."""
    return smoke(verl_runs["every_environment"])


@pytest.mark.parametrize("env_id", ENVIRONMENTS)
def test_the_loop_scores_what_the_environment_scores(
    env_id: str, every_environment_smoke: tuple[int, dict[str, Any]]
) -> None:
    code, report = every_environment_smoke
    episodes = [episode for episode in report["episodes"] if episode["env_id"] == env_id]
    assert len(episodes) == 2, report
    assert all(episode["agree"] for episode in episodes), episodes
    assert (code, report["ok"]) == (0, True), report
    spec = load_spec(env_id)
    for episode in episodes:
        assert episode["loop_reward"] == pytest.approx(episode["direct_reward"])
        assert episode["reward_token_is_last"]
        assert 1 <= episode["turns"] <= spec.max_turns
        assert episode["policy_tokens"] > 0
        assert episode["observation_tokens"] > 0
        # Components, success and evaluation reach verl's batch as per-sample fields.
        assert {"success", "evaluation", "turns", "hit_turn_limit", "truncated", "task_index"} <= set(
            episode["extra_fields"]
        )
        assert episode["num_turns"] == episode["turns"]  # turns, not messages (verl's num_turns/mean is mean_turns)


def test_the_response_length_stops_an_episode_and_the_rewards_still_agree(
    verl_runs: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    code, report = smoke(verl_runs["response_length"])
    assert (code, report["ok"]) == (0, True), report
    (episode,) = report["episodes"]
    assert episode["policy_tokens"] + episode["observation_tokens"] <= 40
    assert episode["turns"] < load_spec("wordle").max_turns


def test_a_first_prompt_over_max_prompt_length_still_makes_a_batch_verl_can_concatenate(
    verl_runs: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    """verl pads each prompt to max_prompt_length and concatenates the batch (AgentLoopWorker._agent_loop_postprocess,
    verl 0.9.1 verl/experimental/agent_loop/agent_loop.py): a longer prompt came out wider and broke torch.cat. The
    overflow now rides in the response window as environment tokens (mtrl.backends.verl.bridge.TokenBridge)."""
    code, report = smoke(verl_runs["prompt_overflow"])
    assert (code, report["ok"]) == (0, True), report
    for episode in report["episodes"]:
        assert episode["prompt_width"] == 512, episode
        assert episode["prompt_tokens"] == 512, episode
        assert episode["loop_reward"] == pytest.approx(episode["direct_reward"])


RUN_DOCUMENT = {
    "run_id": "wordle-v1-20261201T000000Z",
    "environment": "wordle",
    "model": {"id": "Qwen/Qwen2.5-0.5B-Instruct"},
    "lora_rank": 32,
    "group_size": 8,
    "steps": 100,
    "max_prompt_length": 1024,
    "max_response_length": 2048,
    "hyperparameters": {"learning_rate": 1e-6},
    "nnodes": 2,
    "episode_timeout_s": 600,
    # Held-out rows with a baseline: verl validates them through the agent loop before and after training.
    "eval_dataset_uri": "s3://bucket/runs/r/data/eval.jsonl",
    "baseline_evaluation": True,
    "mlflow_tracking_uri": "arn:aws:sagemaker:us-east-1:111122223333:mlflow-app/app-ABCDEF123456",
}


def test_verls_own_trainer_config_accepts_the_runs_overrides(
    verl_runs: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    """Hydra composes verl 0.9.1's ``ppo_trainer`` config with every override the entry point passes (an unknown
    key, or a value of the wrong type, fails the composition)."""
    completed = verl_runs["compose"]  # the entry point with --run-config <RUN_DOCUMENT> --compose-only
    assert completed.returncode == 0, completed.stderr[-3000:]
    values = json.loads(completed.stdout)
    # The RayPPOTrainer path, chosen: verl 0.9.1's default (trainer.use_v1: true, verl/trainer/config/ppo_trainer.yaml)
    # runs TaskRunnerV1, whose first line is `import transfer_queue` (verl/trainer/main_ppo.py), not in the lock.
    assert values["trainer.use_v1"] is False
    assert values["algorithm.adv_estimator"] == "grpo"
    assert values["actor_rollout_ref.rollout.agent.default_agent_loop"] == "mtrl"
    assert values["actor_rollout_ref.rollout.n"] == 8
    assert values["trainer.total_training_steps"] == 100
    assert values["trainer.nnodes"] == 2
    assert values["mtrl.episode_timeout_s"] == 600.0
    assert values["trainer.val_before_train"] is True
    assert values["actor_rollout_ref.rollout.name"] == "vllm"  # mandatory in verl's config (???)
    assert values["data.train_batch_size"] == 16
    assert values["trainer.logger"] == ["console", "mlflow"]
    assert values["trainer.test_freq"] == 100
    assert values["data.val_files"].endswith("eval.parquet")


VALIDATION_SCRIPT = """
import json, sys
import numpy as np
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils.logger.aggregate_logger import concat_dict_to_str
from mtrl.backends.verl.evaluation import validation_figures, is_validation_only
from mtrl.backends.verl.progress import parse_step_line

# Four held-out episodes, one sample each, with the per-sample fields MtrlAgentLoop returns (reward_extra_info).
infos = {
    "reward": [1.3, -0.5, 1.05, -0.5],
    "success": [1.0, 0.0, 1.0, 0.0],
    "evaluation": [1.0, 0.0, 1.0, 0.0],
    "component/solved": [1.0, 0.0, 1.0, 0.0],
    "turns": [3.0, 6.0, 6.0, 6.0],
}
metrics = RayPPOTrainer._val_metrics_update(
    None, np.array(["mtrl/wordle"] * 4), ["a", "b", "c", "d"], infos, [np.array([6, 12, 12, 12])]
)
line = concat_dict_to_str(metrics, step=0)
step, parsed = parse_step_line("(TaskRunner pid=7) " + line)
print(json.dumps({"step": step, "figures": validation_figures(parsed), "only": is_validation_only(parsed)}))
"""


def test_verls_own_validation_metrics_become_the_runs_evaluation(
    verl_runs: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    """verl's real aggregation and console format of a validation (RayPPOTrainer._val_metrics_update, LocalLogger)
    read back by the trainer's parser as the held-out figures the run reports."""
    report = _script_report(verl_runs["validation"])
    assert report["step"] == 0
    assert report["only"] is True  # the line before training trains nothing
    assert report["figures"] == {"reward": pytest.approx(0.3375), "success": 0.5, "evaluation": 0.5}


DUMP_SCRIPT = """
import json, sys, tempfile
from pathlib import Path
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from mtrl.backends.verl.rollout_rows import read_step

# Two tasks with the same prompt text (as every wordle game has), two samples each, with the per-sample fields
# MtrlAgentLoop returns, written by verl's own dump writer.
infos = {
    "task_index": [0.0, 0.0, 1.0, 1.0],
    "success": [1.0, 0.0, 0.0, 0.0],
    "evaluation": [1.0, 0.0, float("nan"), 0.0],
    "turns": [3.0, 6.0, 6.0, 6.0],
    "hit_turn_limit": [0.0, 1.0, 1.0, 1.0],
    "truncated": [0.0, 0.0, 0.0, 1.0],
    "error": [0.0, 0.0, 0.0, 0.0],
    "timeout": [0.0, 0.0, 0.0, 0.0],
    "malformed_actions": [0.0, 2.0, 0.0, 0.0],
}
with tempfile.TemporaryDirectory() as directory:
    RayPPOTrainer._write_generations(
        ["guess"] * 4, ["x"] * 4, [None] * 4, [1.3, -0.5, -0.5, -0.5], infos,
        directory, 1,
    )
    print(json.dumps(read_step(Path(directory), 1).to_dict()))
"""


def test_verls_own_rollout_dump_becomes_the_environment_side_of_a_health_row(
    verl_runs: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    """RayPPOTrainer._write_generations (what trainer.rollout_data_dir writes) read back by rollout_rows."""
    fields = _script_report(verl_runs["dump"])
    assert fields["zero_spread_share"] == 0.5  # task 1's two scores are equal
    assert fields["malformed_share"] == 0.25
    assert fields["cap_hit_share"] == 0.75
    assert fields["truncation_share"] == 0.25
    assert fields["mean_turns"] == pytest.approx(21 / 4)


def test_the_device_check_without_a_gpu_runs_up_to_the_trainer_start_and_says_it_needs_one(
    verl_runs: dict[str, subprocess.CompletedProcess[str]], device_check_work: Path
) -> None:
    """It must run everything up to the trainer's start for real — the tiny model made from a config and loaded back
    from its checksummed copy, the wordle rows converted, verl's trainer config composed with the run's real
    overrides, the agent loop loaded from the registry file as verl loads it — then say plainly that it needs a GPU,
    with exit code 3 (``python -m benchmarks.device.verl_two_steps --json --work <dir>``)."""
    tmp_path = device_check_work
    completed = verl_runs["device_check"]
    assert completed.returncode == 3, completed.stdout[-2000:] + completed.stderr[-3000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["gpu"] is False
    assert "need one GPU" in report["needs_gpu"]
    assert "error" not in report
    before = report["before_trainer_start"]
    assert (before["train_rows"], before["eval_rows"]) == (8, 2)
    assert before["agent_loop"] == "mtrl.backends.verl.agent_loop.MtrlAgentLoop"
    # The rendered run (mtrl render's document): every one of the 8 rows a step, groups of 4.
    assert (before["rollout_engine"], before["batch_prompts"], before["group_size"]) == ("vllm", 8, 4)
    assert report["entrypoint"] == "python -m mtrl.backends.verl.train --run-config /etc/mtrl/run.json"
    # .venv-verl has Ray but no vLLM: the report names it, and the exit is not a pass.
    assert report["missing"] == ["vllm"]
    assert "vllm not installed" in report["needs_gpu"]
    assert before["val_before_train"] is True
    # The model verl would load is the verified copy, and it runs (its logits cover the tokenizer's vocabulary).
    assert Path(before["model_path"]).is_relative_to(tmp_path)
    assert (Path(before["model_path"]) / "model.safetensors").is_file()
    assert before["logits_shape"][::2] == [1, 261]
    assert report["model_parameters"] > 100_000
    # Nothing was trained: no progress file in the run's (local) bucket.
    assert not list((tmp_path / "bucket").rglob("progress.json"))
