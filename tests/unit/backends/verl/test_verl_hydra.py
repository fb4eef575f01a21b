"""A manifest cannot reach verl's Hydra grammar (issue 38 item 1): verl's hyperparameters are numbers checked at
Register, and every override value is rendered from a typed value or refused. Hydra's own parser reading the
rendered overrides back is in tests/contract/test_verl_hydra_overrides.py."""

from __future__ import annotations

import math
import string
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mtrl.backends.verl.hydra import hydra_value
from mtrl.backends.verl.hyperparameters import hyperparameter_problems
from mtrl.contracts.errors import ConfigurationError
from mtrl.runs.manifest import resolve_run_settings
from mtrl.settings.pipeline import PipelineSettings

DEFAULTS = PipelineSettings()
HOSTILE_STRINGS = [
    "${oc.env:AWS_SECRET_ACCESS_KEY}",
    "${oc.decode:'{_target_: os.system, _args_: [id]}'}",
    "{_target_: os.makedirs, _args_: [/tmp/x]}",
    "[1,2]",
    "'quoted'",
    '"quoted"',
    "1e-5",
    "0.0001",
    "a,b",
    "lr=1",
    "x y",
    "\\${escaped}",
    "null",
    "true",
    "nan",
    "",
]


@pytest.mark.parametrize(
    "value", [*HOSTILE_STRINGS, True, None, {"_target_": "os.makedirs"}, ["1"], math.nan, math.inf, 0, 2.0]
)
def test_a_manifest_learning_rate_must_be_a_number_in_range_and_is_refused_at_register(value: Any) -> None:
    with pytest.raises(ConfigurationError, match="learning_rate"):
        resolve_run_settings(DEFAULTS, {"backend": "verl", "hyperparameters": {"learning_rate": value}})


def test_a_number_in_range_is_accepted() -> None:
    resolved = resolve_run_settings(DEFAULTS, {"backend": "verl", "hyperparameters": {"learning_rate": 1e-5}})
    assert resolved.hyperparameters == {"learning_rate": 1e-5}


@pytest.mark.parametrize("name", ["ppo_epochs", "trainer.logger", "_target_", "actor_rollout_ref"])
def test_names_verl_does_not_take_are_refused_naming_the_ones_it_does(name: str) -> None:
    problems = hyperparameter_problems({name: 1})
    assert problems == [f"hyperparameter '{name}' is not one the verl backend takes (it takes: learning_rate)"]


@pytest.mark.parametrize("value", HOSTILE_STRINGS)
def test_no_string_with_grammar_is_rendered(value: str) -> None:
    with pytest.raises(ValueError, match="not a plain string"):
        hydra_value(value)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, {"a": 1}, None, b"x", object()])
def test_non_finite_numbers_and_other_types_are_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="override value"):
        hydra_value(value)


@given(st.text(max_size=30))
def test_any_string_rendered_is_a_plain_word(text: str) -> None:
    try:
        rendered = hydra_value(text)
    except ValueError:
        return
    assert rendered == text
    assert set(text) <= set(string.ascii_letters + string.digits + "_./@+-:")


@given(st.floats(allow_nan=False, allow_infinity=False) | st.integers() | st.booleans())
def test_numbers_and_bools_render_to_their_literal(value: float | int | bool) -> None:
    rendered = hydra_value(value)
    if isinstance(value, bool):
        assert rendered == ("true" if value else "false")
    else:
        assert type(value)(rendered) == value
