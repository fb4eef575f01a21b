"""``baseline_evaluation``: a manifest asks for the base model's held-out evaluation before training
(AWS's multi-turn RL best practices).

Honoured where the backend can measure it (local: the untrained policy at step 0; serverless: an
AgentRFTEvaluation job of the base model before Submit), refused with the backend's name and the reason where it
cannot (hyperpod), strictly typed, and counted in the execution's poll budget (a second evaluation wait loop).
"""

from __future__ import annotations

from typing import Any

import pytest

from mtrl.contracts.errors import ConfigurationError
from mtrl.runs.manifest import RunSettings, resolve_run_settings
from mtrl.runs.phases.register import baseline_phase_wanted
from mtrl.runs.report import baseline_comparison, baseline_lines
from mtrl.settings.pipeline import PipelineSettings

DEFAULTS = PipelineSettings.model_validate({})
EVAL = {"eval_dataset": "eval-data/held-out.jsonl"}


def resolve(manifest: dict[str, Any], defaults: PipelineSettings = DEFAULTS) -> RunSettings:
    return resolve_run_settings(defaults, manifest, source="training-data/x.run.json")


def test_off_by_default_and_no_baseline_phase() -> None:
    settings = resolve({})
    assert settings.baseline_evaluation is False
    assert not baseline_phase_wanted(settings)


def test_the_local_backend_measures_it_inside_training_and_the_evaluate_phase_reports_it() -> None:
    settings = resolve({"backend": "local", "baseline_evaluation": True})
    assert settings.baseline_evaluation is True
    assert not baseline_phase_wanted(settings)  # no job to run: the step-0 evaluation is the baseline
    assert settings.evaluate  # the Evaluate phase runs, so both figures reach the summary


def test_the_serverless_backend_runs_a_baseline_phase_on_the_evaluation_dataset() -> None:
    settings = resolve({"backend": "serverless", "baseline_evaluation": True, **EVAL})
    assert baseline_phase_wanted(settings)
    # An eval_split serves too: Validate writes its held-out rows, which the evaluation channel is made from.
    assert baseline_phase_wanted(resolve({"backend": "serverless", "baseline_evaluation": True, "eval_split": 0.2}))
    with pytest.raises(ConfigurationError, match=r"backend 'serverless' evaluates the base model on held-out rows"):
        resolve({"backend": "serverless", "baseline_evaluation": True, "eval_split": 0.0})


def test_hyperpod_refuses_it_naming_the_backend_and_the_alternative() -> None:
    with pytest.raises(ConfigurationError) as caught:
        resolve({"backend": "hyperpod", "baseline_evaluation": True, **EVAL})
    message = str(caught.value)
    assert "key 'baseline_evaluation': not available on backend 'hyperpod'" in message
    assert "mtrl eval" in message
    assert message.startswith("training-data/x.run.json: ")
    resolve({"backend": "hyperpod", "baseline_evaluation": False})  # asking for none is fine


@pytest.mark.parametrize("value", ["true", 1, "yes", None])
def test_the_option_is_strictly_a_boolean(value: Any) -> None:
    with pytest.raises(ConfigurationError, match="baseline_evaluation"):
        resolve({"backend": "local", "baseline_evaluation": value})


def test_the_second_evaluation_wait_counts_in_the_poll_budget() -> None:
    # 60 min slot / 60 s + 60 min provision / 60 s + run / 60 s + 1200 min evaluation / 60 s: fits once, not twice.
    tight = PipelineSettings.model_validate(
        {
            "slot_max_wait_minutes": 60,
            "provision_max_wait_minutes": 60,
            "status_poll_seconds": 60,
            "evaluation_poll_seconds": 60,
            "evaluation_max_wait_minutes": 1200,
            "run_timeout_minutes": 60,
        }
    )
    resolve({"backend": "serverless", **EVAL}, tight)
    with pytest.raises(ConfigurationError, match=r"evaluating twice \(baseline and after training\)"):
        resolve({"backend": "serverless", "baseline_evaluation": True, **EVAL}, tight)


def test_the_summary_pairs_a_baseline_phase_with_the_after_training_evaluation() -> None:
    record = {
        "settings": {"backend": "serverless", "baseline_evaluation": True},
        "baseline": {"eval/reward/pass_at_1": 0.125},
        "evaluation": {"eval/reward/pass_at_1": 0.5, "eval/reward/pass_at_4": 0.75},
        "evaluation_settings": {"evaluation_measure": "evaluation"},
    }
    comparison = baseline_comparison(record)
    assert comparison is not None
    assert comparison["metrics"] == {
        "eval/reward/pass_at_1": {"baseline": 0.125, "after_training": 0.5},
        "eval/reward/pass_at_4": {"baseline": None, "after_training": 0.75},
    }
    assert baseline_lines(comparison) == [
        "Baseline before training → after training (evaluation): eval/reward/pass_at_1 0.125 → 0.5, "
        "eval/reward/pass_at_4 not measured → 0.75"
    ]


def test_the_summary_pairs_the_local_before_and_after_figures() -> None:
    record = {
        "settings": {"backend": "local", "baseline_evaluation": True},
        "evaluation": {
            "heldout_tasks": 12.0,
            "heldout_evaluation_before": 0.25,
            "heldout_evaluation_after": 0.75,
            "heldout_reward_before": -0.4,
            "heldout_reward_after": 0.9,
        },
    }
    comparison = baseline_comparison(record)
    assert comparison is not None
    assert comparison["metrics"]["heldout_evaluation"] == {"baseline": 0.25, "after_training": 0.75}
    assert comparison["metrics"]["heldout_reward"] == {"baseline": -0.4, "after_training": 0.9}
    assert "heldout_tasks" not in comparison["metrics"]
    assert "step 0" in comparison["how"]


def test_a_run_that_did_not_ask_has_no_baseline_in_its_summary() -> None:
    assert baseline_comparison({"settings": {"backend": "local"}, "evaluation": {"x_before": 1.0}}) is None
    assert baseline_lines(None) == []
