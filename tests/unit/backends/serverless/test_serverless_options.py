"""The per-run serverless option table: documented ranges (MTRL hyperparameters reference), unknown keys refused,
the region/model table, and the manifest check at Register."""

from __future__ import annotations

from typing import Any

import pytest

from mtrl.backends.serverless.options import (
    HYPERPARAMS,
    RUN_OPTIONS,
    TRAINING_HYPERPARAMETERS,
    manifest_problems,
    model_region_problem,
)
from mtrl.contracts.errors import ConfigurationError
from mtrl.runs.manifest import resolve_run_settings
from mtrl.settings.pipeline import PipelineSettings

DEFAULTS = PipelineSettings.model_validate({"run_backend": "serverless"})


@pytest.mark.parametrize(
    ("name", "good", "bad"),
    [
        # Each row: the range in the MTRL hyperparameters reference (model-customize-mtrl-hyperparams)
        ("group_size", [2, 8, 32], [1, 33, 4.5, True, "8"]),
        ("global_batch_size", [32, 64, 128], [16, 96, 256]),
        ("advantage_method", ["group_based", "rloo", "grpo_passk"], ["grpo", "", 1]),
        ("loss_fn", ["ppo", "cispo", "importance_sampling"], ["dpo"]),
        ("learning_rate", [1e-5, 1e-2], [0, 0.02, -1e-5, float("nan")]),
        ("max_steps", [1, 1000], [0, 1001]),
        ("lora_rank", [16, 64], [8, 128]),
        ("lora_alpha", [16, 128], [8, 256]),
        ("temperature", [0, 2], [2.1, -0.1]),
        ("sampling_max_tokens", [512, 8192], [511, 8193]),
        ("clip_high_threshold", [1, 10], [0.9, 11]),
        ("max_epochs", [1, 30], [0, 31]),
        ("rollout_max_concurrency", [32, 96], [31, 97]),
    ],
)
def test_documented_ranges(name: str, good: list[Any], bad: list[Any]) -> None:
    option = TRAINING_HYPERPARAMETERS[name]
    for value in good:
        assert option.problem(value) is None, value
    for value in bad:
        assert option.problem(value), value


def test_every_row_names_its_source() -> None:
    for option in [*TRAINING_HYPERPARAMETERS.values(), *RUN_OPTIONS.values()]:
        assert option.source, option.name
    assert TRAINING_HYPERPARAMETERS["group_size"].source == HYPERPARAMS


def test_run_options() -> None:
    ok = {
        "reasoning_effort": "high",
        "intermediate_checkpoints": True,
        "notifications": "failures",
        "eval_group_size": 4,
        "eval_pass_k": [1, 2, 4],
        "eval_hyperparameters": {"temperature": 0.0, "sampling_max_tokens": 8192},
    }
    assert manifest_problems({"group_size": 8}, ok) == []
    problems = manifest_problems(
        {"kl_coef": 1},
        {
            "reasoning_effort": "max",
            "serverless_job_role_arn": "arn:aws:iam::123456789012:role/x",  # deploy-time: never from a manifest
            "eval_pass_k": [8],
            "eval_group_size": 4,
            "eval_hyperparameters": {"group_size": 8},
            "agent_qualifier": "DEFAULT",
        },
    )
    text = "; ".join(problems)
    assert "'kl_coef' is not a documented serverless MTRL hyperparameter" in text
    assert "'reasoning_effort' must be one of low, medium, high" in text
    assert "'serverless_job_role_arn' is not a per-run serverless option" in text
    assert "'eval_pass_k' [8] exceed eval_group_size (4)" in text
    assert "eval_hyperparameters 'group_size' is not a documented" in text
    assert "'agent_qualifier' needs 'agent_runtime_arn'" in text
    runtime = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/Wordle_Wordle-abc123"
    assert manifest_problems({}, {"agent_runtime_arn": runtime}) == []
    assert manifest_problems({}, {"agent_runtime_arn": "runtime/abc"})
    assert "reads its own setting" in " ".join(
        manifest_problems({}, {"agent_runtime_arn": runtime, "reasoning_effort": "low"})
    )


def test_region_model_table() -> None:
    assert model_region_problem("openai-reasoning-gpt-oss-20b", "us-west-2") is None
    assert model_region_problem("gpt-oss-20b", "us-east-1") is None
    assert "not in eu-west-1" in str(model_region_problem("nova-textgeneration-lite-v2", "eu-west-1"))
    assert "is not one serverless MTRL offers" in str(model_region_problem("llama-9", "us-east-1"))


def test_qwen_3_6_27b_is_offered_in_us_west_2_only() -> None:
    # Issue 20 item 9. SageMaker AI developer guide, "Open weight model customization": huggingface-vlm-qwen3-6-27b
    # (Qwen3.6 27B) is marked for MTRL (LoRA); aws/sagemaker-hyperpod-recipes mtrl_regional_parameters.json: the MTRL
    # trainer image is in us-west-2 only (shared/reference/open_model_grpo_research.md §4).
    assert model_region_problem("huggingface-vlm-qwen3-6-27b", "us-west-2") is None
    assert model_region_problem("qwen3.6-27b", "us-west-2") is None
    refused = str(model_region_problem("huggingface-vlm-qwen3-6-27b", "us-east-1"))
    assert "offers Qwen3.6 27B (huggingface-vlm-qwen3-6-27b) in us-west-2, not in us-east-1" in refused


def test_manifest_is_checked_at_register_for_serverless_runs_only() -> None:
    with pytest.raises(ConfigurationError, match=r"'group_size' must be in \[2, 32\] \(got 64\)"):
        resolve_run_settings(DEFAULTS, {"hyperparameters": {"group_size": 64}}, source="m.run.json")
    with pytest.raises(ConfigurationError, match=r"'backend_options\.region': a deploy-time setting"):
        resolve_run_settings(DEFAULTS, {"backend_options": {"region": "eu-west-1"}})
    with pytest.raises(ConfigurationError, match="not a per-run option of backend 'serverless'"):
        resolve_run_settings(DEFAULTS, {"backend_options": {"colour": "red"}})
    with pytest.raises(ConfigurationError, match="'reasoning_effort' must be one of low, medium, high"):
        resolve_run_settings(DEFAULTS, {"backend_options": {"reasoning_effort": "max"}})
    other = resolve_run_settings(DEFAULTS, {"backend": "local", "hyperparameters": {"group_size": 64}})
    assert other.hyperparameters == {"group_size": 64}  # another backend's names are its own
