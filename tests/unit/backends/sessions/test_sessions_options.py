"""The sessions backend's per-run options: each bounded, the base model fitting the service, unknown keys refused
(through the registry, as Register checks a manifest)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from mtrl.backends.sessions.options import SessionsRunOptions, run_options
from mtrl.contracts.errors import ConfigurationError
from mtrl.contracts.run_options import run_options_model, validate_backend_options

HUB_MODEL = "arn:aws:sagemaker:us-west-2:aws:hub-content/SageMakerPublicHub/Model/qwen3-4b/1.0.0"


def test_the_registry_gives_the_sessions_options_model() -> None:
    assert run_options_model("sessions") is SessionsRunOptions


def test_a_local_run_defaults_to_the_tiny_model() -> None:
    options = SessionsRunOptions(service="local")
    assert options.model == "tiny"
    assert (options.loss, options.lora_rank) == ("importance_sampling", 16)


@pytest.mark.parametrize(
    ("given", "cause"),
    [
        ({"lora_rank": 0}, "lora_rank"),
        ({"lora_rank": 257}, "lora_rank"),
        ({"steps": 1001}, "steps"),
        ({"group_size": 1}, "group_size"),
        ({"tasks_per_step": 0}, "tasks_per_step"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"learning_rate": 0.5}, "learning_rate"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": 2.5}, "temperature"),
        ({"loss": "cispo"}, "loss"),
        ({"steps": "8"}, "steps"),  # a manifest's "8" is not a number
        ({"base_model": "relative/dir"}, "a local run takes 'tiny' or an absolute path"),
    ],
)
def test_each_option_is_bounded(given: dict[str, Any], cause: str) -> None:
    with pytest.raises(ConfigurationError, match=cause):
        validate_backend_options("sessions", {"service": "local", **given})


def test_a_sagemaker_run_needs_a_hub_model_arn_and_a_tokenizer() -> None:
    with pytest.raises(ValidationError, match="Hub model ARN"):
        SessionsRunOptions(service="sagemaker", base_model="tiny", tokenizer="Qwen/Qwen3-4B")
    with pytest.raises(ValidationError, match="tokenizer"):
        SessionsRunOptions(service="sagemaker", base_model=HUB_MODEL)
    options = SessionsRunOptions(service="sagemaker", base_model=HUB_MODEL, tokenizer="Qwen/Qwen3-4B")
    assert options.model == HUB_MODEL


def test_unknown_and_deploy_time_keys_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="not a per-run option of backend 'sessions'"):
        validate_backend_options("sessions", {"service": "local", "sessions_role_arn": "arn:aws:iam::1:role/x"})


def test_the_options_of_effective_settings_are_read_laxly() -> None:
    settings = {
        "region": "us-east-1",
        "service": "local",
        "learning_rate": 0.001,
        "steps": 3.0,
        "environment": "wordle",
    }
    options = run_options(settings)  # a JSON round trip may give 3.0 for 3
    assert (options.steps, options.learning_rate) == (3, 0.001)
