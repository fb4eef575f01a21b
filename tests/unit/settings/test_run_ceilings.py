"""The per-run ceilings the pipeline Lambdas receive: an instance group's run_count, reward_worker_max_tasks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mtrl.settings import SettingsError, load_settings
from mtrl.settings.pipeline import PipelineSettings, manifest_ceilings, manifest_defaults, pipeline_settings_json

GROUPS = [{"name": "gpu", "instance_type": "ml.g5.8xlarge", "run_count": 4, "purpose": "training"}]
RESTRICTED = {"name": "nova-rig", "instance_type": "ml.p5.48xlarge", "run_count": 2}


def _shipped(context: dict[str, Any]) -> PipelineSettings:
    """What the pipeline functions parse from MTRL_PIPELINE_SETTINGS for this deployment."""
    return PipelineSettings.model_validate_json(pipeline_settings_json(load_settings(context, environ={})))


def test_empty_ceilings_ship_as_the_values_they_follow_from() -> None:
    shipped = _shipped({"hyperpod_instance_groups": json.dumps(GROUPS), "reward_worker_max_tasks": 6})
    assert (shipped.run_max_instance_count, shipped.run_max_worker_count) == (4, 6)
    with_rig = _shipped({"hyperpod_instance_groups": GROUPS, "hyperpod_restricted_instance_group": RESTRICTED})
    assert with_rig.run_max_instance_count == 2  # runs scale the restricted group when there is one


def test_an_existing_cluster_has_no_known_run_count() -> None:
    shipped = _shipped({"existing_hyperpod_cluster_name": "theirs", "existing_eks_cluster_name": "theirs-eks"})
    assert shipped.run_max_instance_count is None
    explicit = _shipped(
        {"existing_hyperpod_cluster_name": "t", "existing_eks_cluster_name": "e", "run_max_instance_count": 3}
    )
    assert explicit.run_max_instance_count == 3


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"hyperpod_instance_groups": GROUPS, "run_max_instance_count": 5}, "run_max_instance_count': 5 is above"),
        ({"reward_worker_max_tasks": 3, "run_max_worker_count": 4}, "above reward_worker_max_tasks (3)"),
        ({"reward_worker_max_tasks": 3, "run_worker_count": 4}, "run_worker_count': 4 is above reward_worker_max"),
        ({"run_max_instance_count": 1, "run_instance_count": 2}, "above run_max_instance_count (1)"),
    ],
)
def test_ceilings_cannot_exceed_what_they_follow_from(context: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match="invalid configuration") as raised:
        load_settings(context, environ={})
    assert message in str(raised.value)


def test_manifest_keys_come_from_the_field_metadata() -> None:
    settings = PipelineSettings(run_max_budget_usd=50, run_timeout_minutes=60)
    assert manifest_defaults(settings) == {
        "backend": "verl",
        "environment": "wordle",
        "instance_count": 1,
        "worker_count": 2,
        "eval_split": 0.0,
        "run_timeout_minutes": 60,
        "max_budget_usd": 50.0,
    }
    assert manifest_ceilings(settings) == {
        "instance_count": ("run_max_instance_count", None),
        "worker_count": ("run_max_worker_count", None),
        "run_timeout_minutes": ("run_timeout_minutes", 60),
        "max_budget_usd": ("run_max_budget_usd", 50.0),
    }
