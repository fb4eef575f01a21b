"""A manifest cannot lift the operator's limits: attacks through the manifest, seen where the adapter sees them.

Whoever can upload to training-data/ writes the manifest. Before the per-run/deploy-time split,
``backend_options`` was merged over the deploy-time backend settings, so ``{"instance_count": 8,
"backend_options": {"hyperpod_max_instance_count": 64}}`` lifted the run_count ceiling and provision scaled the
GPU group to 8; the environment checked by Validate, the budget, the cluster, the RFT role and the region could be
replaced the same way. These tests drive the real manifest resolution and ``adapter_settings`` (what Preflight
stores and the adapter is given) and parse the result with the real adapter settings models.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from mtrl.backends.hyperpod import HyperPodSettings
from mtrl.backends.hyperpod import parse_settings as parse_hyperpod_settings
from mtrl.backends.serverless.adapter import ServerlessSettings
from mtrl.contracts.errors import ConfigurationError
from mtrl.contracts.registry import backend_names
from mtrl.runs.manifest import RunSettings, resolve_run_settings
from mtrl.runs.phases.inputs import adapter_settings
from mtrl.runs.runtime import Runtime
from mtrl.settings.deploy import DeploySettings
from mtrl.settings.pipeline import PipelineSettings

DEFAULTS = PipelineSettings.model_validate({})
# What the deployment ships the backend function (each backend's section: stacks/backends/), run_count 1; every
# backend gets the whole dict here, so a run of any backend sees every deploy-time key an option might try to replace.
DEPLOY: dict[str, Any] = {
    "region": "us-east-1",
    "prefix": "mtrl",
    "data_bucket": "mtrl-data-111122223333",
    "kms_key_arn": "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab",
    "hyperpod_cluster_name": "mtrl-hp",
    "hyperpod_gpu_instance_group": "gpu",
    "hyperpod_idle_instance_count": 0,
    "hyperpod_max_instance_count": 1,
    "hyperpod_capacity_timeout_minutes": 60,
    "ecs_cluster_arn": "arn:aws:ecs:us-east-1:111122223333:cluster/mtrl-reward-workers",
    "task_subnet_ids": ["subnet-1"],
    "task_security_group_ids": ["sg-1"],
    "reward_task_definition": "mtrl-reward-worker",
    "reward_worker_run_boundary_arn": "arn:aws:iam::111122223333:policy/mtrl-reward-worker-run-boundary",
    "reward_worker_base_policy_arn": "arn:aws:iam::111122223333:policy/mtrl-reward-worker-base",
    "reward_container_name": "worker",
    "nova_runner_task_definition": "mtrl-nova-runner",
    "nova_runner_container_name": "runner",
    "nova_rft_role_name": "mtrl-rft",
    "nova_model": "NOVA_LITE_2",
    "nova_training_method": "RFT_MULTITURN_LORA",
    "serverless_job_role_arn": "arn:aws:iam::111122223333:role/mtrl-serverless-job",
    "serverless_agent_lambda_arns": ["wordle=arn:aws:lambda:us-east-1:111122223333:function:mtrl-agent-wordle"],
    "serverless_mlflow_app_arn": "arn:aws:sagemaker:us-east-1:111122223333:mlflow-app/app-1",
    "serverless_model_package_group_arn": "arn:aws:sagemaker:us-east-1:111122223333:model-package-group/mtrl",
    "serverless_base_model": "openai-reasoning-gpt-oss-20b",
    "serverless_accept_eula": True,
}
SHIPPED = dict.fromkeys(backend_names(), DEPLOY)


def adapter_view(manifest: dict[str, Any], defaults: PipelineSettings = DEFAULTS) -> dict[str, Any] | str:
    """The settings the backend adapter would receive for this manifest, or the refusal (Register or later)."""
    try:
        settings = resolve_run_settings(defaults, json.loads(json.dumps(manifest)), source="manifest m.run.json")
        record = {
            "run_id": "attack-1",
            "settings": settings.model_dump(mode="json"),
            "dataset": {"bucket": "data", "key": "training-data/attack.jsonl", "version_id": "v1"},
        }
        runtime = Runtime(dynamodb=None, s3=None, table="t", bucket="data", settings=defaults, backend_settings=SHIPPED)
        return adapter_settings(runtime, record, settings)
    except ConfigurationError as error:
        return str(error)


# -- the attacks from the issue -------------------------------------------------------------------------------
def test_backend_options_cannot_lift_the_run_count_ceiling() -> None:
    view = adapter_view({"instance_count": 8, "backend_options": {"hyperpod_max_instance_count": 64}})
    assert isinstance(view, str), (
        "the manifest was accepted: the hyperpod adapter would get ceiling "
        f"{parse_hyperpod_settings(view).hyperpod_max_instance_count} and scale to {view['instance_count']}"
    )
    assert "backend_options.hyperpod_max_instance_count" in view
    assert "deploy-time setting" in view


def test_instance_count_above_the_deployed_ceiling_is_refused_at_register() -> None:
    deployed = PipelineSettings.model_validate({"run_max_instance_count": 1})
    view = adapter_view({"instance_count": 8}, deployed)
    assert isinstance(view, str)
    assert "key 'instance_count': 8 is above the deployment's limit 1 (run_max_instance_count)" in view


@pytest.mark.parametrize(
    ("options", "deploy_key"),
    [
        ({"environment": "ask_to_code"}, "environment"),  # Validate checked the dataset against wordle
        ({"max_budget_usd": 1e9}, "max_budget_usd"),
        ({"hyperpod_cluster_name": "someone-elses-cluster"}, "hyperpod_cluster_name"),
        ({"nova_rft_role_name": "admin"}, "nova_rft_role_name"),
        ({"region": "eu-west-1"}, "region"),
        ({"hyperpod_gpu_instance_group": "system"}, "hyperpod_gpu_instance_group"),
    ],
)
def test_backend_options_cannot_replace_validated_or_deploy_time_values(
    options: dict[str, Any], deploy_key: str
) -> None:
    view = adapter_view({"max_budget_usd": 10, "backend_options": options})
    if isinstance(view, dict):
        expected = DEPLOY.get(deploy_key, {"environment": "wordle", "max_budget_usd": 10}.get(deploy_key))
        assert view[deploy_key] == expected, f"the adapter would use {deploy_key}={view[deploy_key]!r}"
    else:
        assert f"'backend_options.{deploy_key}'" in view


# -- every deploy-time key, iterated from the settings models --------------------------------------------------
def _sample(field: Any) -> Any:
    default = None if field.is_required() else field.get_default(call_default_factory=True)
    return default if default not in (None, [], {}) else "x"


RUN_KEYS = set(RunSettings.model_fields)
DEPLOY_FIELDS = dict(DeploySettings.model_fields)
ADAPTER_FIELDS = {"hyperpod": HyperPodSettings.model_fields, "serverless": ServerlessSettings.model_fields}


def _per_run_options(backend: str) -> set[str]:
    from mtrl.contracts.run_options import per_run_option_names

    return set(per_run_option_names(backend))


def _deploy_time_keys(backend: str) -> dict[str, Any]:
    fields = {**DEPLOY_FIELDS, **ADAPTER_FIELDS.get(backend, {})}
    return {name: field for name, field in fields.items() if name not in RUN_KEYS | _per_run_options(backend)}


@pytest.mark.parametrize("key", sorted(set(DEPLOY_FIELDS) - RUN_KEYS))
def test_every_deploy_time_setting_is_refused_at_the_top_level(key: str) -> None:
    view = adapter_view({key: _sample(DEPLOY_FIELDS[key])})
    assert isinstance(view, str), f"{key} was accepted in a manifest"
    assert f"key '{key}': a deploy-time setting" in view


@pytest.mark.parametrize("backend", ["hyperpod", "serverless", "local"])
def test_every_deploy_time_setting_is_refused_inside_backend_options(backend: str) -> None:
    keys = _deploy_time_keys(backend)
    assert len(keys) > len(DEPLOY_FIELDS) // 2  # iterates the models, not a hand list
    accepted = []
    for key, field in keys.items():
        view = adapter_view({"backend": backend, "backend_options": {key: _sample(field)}})
        if not isinstance(view, str) or f"'backend_options.{key}'" not in view:
            accepted.append(key)
    assert accepted == [], f"backend {backend}: deploy-time keys accepted in backend_options: {accepted}"


@pytest.mark.parametrize("key", sorted(RUN_KEYS - {"backend_options"}))
def test_run_settings_cannot_be_set_again_inside_backend_options(key: str) -> None:
    view = adapter_view({"backend_options": {key: _sample(RunSettings.model_fields[key])}})
    assert isinstance(view, str)
    assert f"key 'backend_options.{key}': a run setting" in view


def test_deploy_time_keys_in_a_stored_record_never_reach_the_adapter(mocked_aws: None) -> None:
    # mocked_aws: a verl run's Preflight reads the deployment's catalog (empty here) before composing.
    # A record edited in the table: Preflight's composition refuses it itself.
    settings = resolve_run_settings(DEFAULTS, None).model_dump(mode="json")
    settings["backend_options"] = {"hyperpod_max_instance_count": 64}
    record = {"run_id": "old-1", "settings": settings, "dataset": {"bucket": "data", "key": "training-data/a.jsonl"}}
    runtime = Runtime(dynamodb=None, s3=None, table="t", bucket="data", settings=DEFAULTS, backend_settings=SHIPPED)
    with pytest.raises(ConfigurationError, match=r"run old-1: key 'backend_options\.hyperpod_max_instance_count'"):
        adapter_settings(runtime, record, RunSettings.model_validate(settings))


def test_per_run_serverless_options_reach_the_adapter_and_replace_only_what_they_declare() -> None:
    runtime_arn = "arn:aws:bedrock-agentcore:us-east-1:111122223333:runtime/my_agent-abc123"
    view = adapter_view(
        {
            "backend": "serverless",
            "backend_options": {"agent_runtime_arn": runtime_arn, "eval_group_size": 4},
        },
        PipelineSettings.model_validate({"run_allowed_agent_runtime_arns": [runtime_arn]}),
    )
    assert isinstance(view, dict), view
    parsed = ServerlessSettings.model_validate(view)
    assert parsed.agent_runtime_arn == runtime_arn  # the run's agent; the deployed settings stay as they are
    assert parsed.serverless_agent_lambda_arns == ServerlessSettings.model_validate(DEPLOY).serverless_agent_lambda_arns
    assert parsed.eval_group_size == 4
    assert parsed.serverless_job_role_arn == DEPLOY["serverless_job_role_arn"]


@pytest.mark.parametrize(
    "allowed",
    [[], ["arn:aws:bedrock-agentcore:us-east-1:111122223333:runtime/the_operators_agent-abc123"]],
    ids=["none listed", "another listed"],
)
def test_an_agent_runtime_the_operator_did_not_list_is_refused_at_register(allowed: list[str]) -> None:
    # Issue 20 item 6: a manifest's agent_runtime_arn could name any AgentCore runtime of the account, which then plays
    # the run's episodes (and is invoked with the job role). Only the runtimes the operator lists may be named.
    foreign = "arn:aws:bedrock-agentcore:us-east-1:111122223333:runtime/someone_elses-xyz789"
    defaults = PipelineSettings.model_validate({"run_allowed_agent_runtime_arns": allowed})
    manifest = {"backend": "serverless", "backend_options": {"agent_runtime_arn": foreign}}
    with pytest.raises(ConfigurationError) as refused:
        resolve_run_settings(defaults, manifest, source="manifest m.run.json")
    message = str(refused.value)
    assert f"key 'backend_options.agent_runtime_arn': {foreign} is not a runtime this deployment allows" in message
    assert f"run_allowed_agent_runtime_arns: {', '.join(allowed) or 'none'}" in message
    assert adapter_view(manifest, defaults) == message  # and nothing reaches the adapter


def test_the_runtime_allow_list_takes_only_runtime_arns() -> None:
    for bad in (["runtime/abc"], ["arn:aws:lambda:us-east-1:111122223333:function:f"], ["a", "a"]):
        with pytest.raises(ValueError, match="run_allowed_agent_runtime_arns"):
            PipelineSettings.model_validate({"run_allowed_agent_runtime_arns": bad})


# -- ceilings -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("deployed", "manifest", "problem"),
    [
        ({"run_max_worker_count": 4}, {"worker_count": 5}, "key 'worker_count': 5 is above the deployment's limit 4"),
        ({"run_timeout_minutes": 60}, {"run_timeout_minutes": 120}, "120 is above the deployment's limit 60"),
        ({"run_max_budget_usd": 100}, {"max_budget_usd": 1000}, "1000.0 is above the deployment's limit 100.0"),
        ({"run_max_budget_usd": 100}, {"max_budget_usd": None}, "limits it to 100.0 (run_max_budget_usd)"),
    ],
)
def test_per_run_values_stay_within_the_deploy_time_ceilings(
    deployed: dict[str, Any], manifest: dict[str, Any], problem: str
) -> None:
    view = adapter_view(manifest, PipelineSettings.model_validate(deployed))
    assert isinstance(view, str)
    assert problem in view


def test_values_below_the_ceilings_are_accepted(mocked_aws: None) -> None:  # the catalog, as above
    deployed = PipelineSettings.model_validate(
        {"run_max_instance_count": 4, "run_max_worker_count": 4, "run_timeout_minutes": 60, "run_max_budget_usd": 100}
    )
    view = adapter_view(
        {"instance_count": 4, "worker_count": 3, "run_timeout_minutes": 30, "max_budget_usd": 50}, deployed
    )
    assert isinstance(view, dict), view
    parsed = parse_hyperpod_settings(view)
    assert (parsed.instance_count, parsed.worker_count, parsed.hyperpod_max_instance_count) == (4, 3, 1)
    assert view["max_budget_usd"] == 50


# -- strict types ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "manifest",
    [
        {"instance_count": "8"},
        {"instance_count": True},
        {"instance_count": 2.0},
        {"worker_count": "2"},
        {"eval_split": "0.1"},
        {"eval_split": True},
        {"run_timeout_minutes": 60.5},
        {"max_budget_usd": "10"},
        {"max_budget_usd": False},
        {"backend": ["hyperpod"]},
        {"environment": 7},
        {"backend": "serverless", "backend_options": {"eval_group_size": "4"}},
        {"backend": "serverless", "backend_options": {"intermediate_checkpoints": 1}},
    ],
)
def test_manifest_types_are_strict(manifest: dict[str, Any]) -> None:
    view = adapter_view(manifest)
    assert isinstance(view, str), f"{manifest} was accepted"
    (key,) = [k for k in manifest if k != "backend"] or ["backend"]
    assert f"key '{key}" in view


@pytest.mark.parametrize("backend", ["verl", "hyperpod"])
def test_a_cluster_backend_is_refused_at_register_in_a_deployment_without_a_cluster(backend: str) -> None:
    # The serverless profile (deploy_cluster=false): no EKS, no HyperPod, so verl and hyperpod runs cannot train.
    defaults = PipelineSettings.model_validate({"deploy_cluster": False})
    assert defaults.run_backend == "serverless"
    with pytest.raises(ConfigurationError, match=rf"key 'backend': '{backend}' trains on the deployment's HyperPod"):
        resolve_run_settings(defaults, {"backend": backend})
    for fine in ("serverless", "local"):
        assert resolve_run_settings(defaults, {"backend": fine}).backend == fine
