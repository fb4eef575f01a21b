"""`mtrl validate` applies the pipeline's default limits without loading the settings models (issue 25)."""

from __future__ import annotations

from mtrl.settings.pipeline import PipelineSettings
from mtrl.validation.dataset import Limits


def test_the_validators_default_limits_are_the_pipelines() -> None:
    assert Limits(max_errors=7) == Limits.from_settings(PipelineSettings.model_validate({}), max_errors=7)


def test_a_deployment_that_changes_a_limit_is_not_served_the_default() -> None:
    changed = PipelineSettings.model_validate({"dataset_max_rows": 10})
    assert Limits.from_settings(changed, max_errors=7).max_rows == 10 != Limits().max_rows
