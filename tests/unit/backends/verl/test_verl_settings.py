"""The verl backend's deploy-time settings, its per-run options, and the default backend (issue 21 item 7)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mtrl.cli import app as cli
from mtrl.contracts.errors import ConfigurationError
from mtrl.contracts.registry import backend_names, descriptor_for
from mtrl.contracts.run_options import run_options_model
from mtrl.runs.manifest import resolve_run_settings
from mtrl.settings import SettingsError, load_settings
from mtrl.settings.pipeline import PipelineSettings

REPO_ROOT = Path(__file__).resolve().parents[4]
RESTRICTED = {"name": "nova-rig", "instance_type": "ml.p5.48xlarge", "run_count": 2}
S3_MODEL = {"id": "Qwen/Qwen2.5-0.5B-Instruct", "s3_uri": "s3://models-bucket/qwen/", "sha256": "a" * 64}


def test_runs_default_to_verl_without_a_restricted_group() -> None:
    assert load_settings({}, environ={}).run_backend == "verl"


def test_runs_default_to_hyperpod_when_a_restricted_group_is_configured() -> None:
    with_rig = load_settings({"hyperpod_restricted_instance_group": json.dumps(RESTRICTED)}, environ={})
    assert with_rig.run_backend == "hyperpod"
    # An explicit choice is kept: a deployment with Nova Forge may still train open-weight models by default.
    chosen = load_settings({"hyperpod_restricted_instance_group": RESTRICTED, "run_backend": "verl"}, environ={})
    assert chosen.run_backend == "verl"


def test_hyperpod_without_a_restricted_group_is_refused_naming_the_setting() -> None:
    # Nova Forge SDK 1.4.10 validator refuses a job unless the cluster has a restricted instance group (issue 21).
    with pytest.raises(SettingsError) as raised:
        load_settings({"run_backend": "hyperpod"}, environ={})
    assert "setting 'run_backend'" in str(raised.value)
    assert "hyperpod_restricted_instance_group is not set" in str(raised.value)


def test_config_show_refuses_hyperpod_without_a_restricted_group_as_synth_does() -> None:
    args = ["config", "show", "--cdk-json", str(REPO_ROOT / "cdk.json"), "-c", "run_backend=hyperpod"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "hyperpod_restricted_instance_group" in result.output
    assert "Traceback" not in result.output


def test_verl_is_a_registered_backend_everywhere_backends_are_named() -> None:
    assert "verl" in backend_names()
    assert descriptor_for("verl").adapter == "mtrl.backends.verl.adapter:VerlAdapter"
    assert set(run_options_model("verl").model_fields) == {
        "model",
        "lora_rank",
        "group_size",
        "steps",
        "max_prompt_length",
        "max_response_length",
    }


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"verl_models": [{"id": "Qwen/Qwen3-1.7B"}]}, "has no s3_uri, and verl_hub_downloads is off"),
        ({"verl_models": [{"id": "Qwen/Qwen3-1.7B"}], "verl_hub_downloads": True}, "pin its revision"),
        ({"verl_models": [{"id": "Qwen/Qwen3-1.7B", "s3_uri": "s3://b-1/m/"}]}, "s3_uri and sha256 go together"),
        ({"verl_models": [S3_MODEL, S3_MODEL]}, "model ids must be unique"),
        ({"verl_models": [{**S3_MODEL, "id": "not-an-hf-id"}]}, "verl_models.0.id"),
        ({"verl_models": [{**S3_MODEL, "s3_uri": "s3://bucket/no-trailing-slash"}]}, "verl_models.0.s3_uri"),
        ({"verl_lora_rank": 128}, "'verl_lora_rank': 128 is above verl_max_lora_rank (64)"),
        ({"verl_steps": 5000}, "'verl_steps': 5000 is above verl_max_steps (1000)"),
        ({"verl_response_length": 9000}, "above verl_max_response_length"),
        ({"verl_lora_rank": 0}, "needs verl_allow_full_finetuning"),
        ({"verl_ttl_seconds_after_finished": 600}, "verl_ttl_seconds_after_finished"),
        ({"verl_image_uri": "verl-trainer"}, "verl_image_uri"),
        ({"verl_image_uri": "example.com/verl@sha256:abc"}, "verl_image_uri"),
        ({"verl_namespace": "Not_A_Label"}, "verl_namespace"),
        ({"verl_namespace": "kube-system"}, "'kube-system' is a namespace mtrl does not own"),
        ({"verl_namespace": "default"}, "'default' is a namespace mtrl does not own"),
        ({"verl_namespace": "kubeflow"}, "'kubeflow' is a namespace mtrl does not own"),
    ],
)
def test_bad_verl_settings_are_refused_by_name(context: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        load_settings(context, environ={})
    assert message in str(raised.value)


def test_good_verl_settings_load() -> None:
    settings = load_settings(
        {
            "verl_models": json.dumps([S3_MODEL, {"id": "Qwen/Qwen3-1.7B", "revision": "b" * 40}]),
            "verl_hub_downloads": "true",
            "verl_image_uri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/verl-trainer@sha256:" + "c" * 64,
            "verl_lora_rank": "0",
            "verl_allow_full_finetuning": "true",
        },
        environ={},
    )
    assert [m.id for m in settings.verl_models] == ["Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen3-1.7B"]
    assert settings.verl_lora_rank == 0


DEFAULTS = PipelineSettings()


def test_a_manifest_sets_verl_options_strictly() -> None:
    resolved = resolve_run_settings(DEFAULTS, {"backend_options": {"lora_rank": 8, "steps": 20}})
    assert resolved.backend == "verl"
    assert resolved.backend_options == {"lora_rank": 8, "steps": 20}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"lora_rank": "8"}, "backend_options.lora_rank"),
        ({"lora_rank": 8.0}, "backend_options.lora_rank"),
        ({"steps": 0}, "backend_options.steps"),
        ({"group_size": 1}, "backend_options.group_size"),
        ({"lora_rank": 10_000}, "backend_options.lora_rank"),
        ({"max_response_length": True}, "backend_options.max_response_length"),
        ({"learning_rate": 1e-5}, "not a per-run option of backend 'verl'"),
        ({"verl_image_uri": "x"}, "a deploy-time setting; a manifest cannot set it"),
        ({"verl_max_steps": 10**5}, "a deploy-time setting; a manifest cannot set it"),
        ({"instance_count": 2}, "a run setting; set it at the top level"),
    ],
)
def test_a_manifest_cannot_set_bad_or_deploy_time_verl_options(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        resolve_run_settings(DEFAULTS, {"backend": "verl", "backend_options": options}, source="m.run.json")
    assert message in str(raised.value)
