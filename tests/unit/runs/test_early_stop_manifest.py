"""The manifest's early_stop key: true, {"rules": [...]} naming rules with a stop level, or an error that says which."""

from __future__ import annotations

import json

import pytest

from mtrl.contracts.errors import ConfigurationError
from mtrl.runs.manifest import EARLY_STOP_RULES, EarlyStop, parse_manifest, resolve_run_settings
from mtrl.settings.pipeline import PipelineSettings


def _settings(manifest: dict[str, object]) -> object:
    text = json.dumps(manifest)
    return resolve_run_settings(PipelineSettings(), parse_manifest(text, source="m.run.json"), source="m.run.json")


def test_default_is_notify_only() -> None:
    assert _settings({}).early_stop is False  # type: ignore[attr-defined]


def test_true_and_a_rule_list() -> None:
    assert _settings({"early_stop": True}).early_stop is True  # type: ignore[attr-defined]
    chosen = _settings({"early_stop": {"rules": ["flat_groups", "eval_divergence"]}}).early_stop  # type: ignore[attr-defined]
    assert chosen == EarlyStop(rules=["flat_groups", "eval_divergence"])


def test_every_rule_with_a_stop_level_can_be_chosen_and_incomplete_is_not_optional() -> None:
    assert set(EARLY_STOP_RULES) == {
        "flat_groups",
        "eval_divergence",
        "plateau",
        "malformed_actions",
        "truncation",
        "entropy_collapse",
        "kl_spike",
        "reward_errors",
    }


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"rules": ["cap_hits"]}, "have no stop level"),
        ({"rules": ["incomplete"]}, "have no stop level"),
        ({"rules": []}, "at least 1"),
        ({"rules": ["flat_groups"], "action": "pause"}, "action"),
        ("yes please", "early_stop"),
    ],
)
def test_bad_values_name_the_problem(value: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        _settings({"early_stop": value})
