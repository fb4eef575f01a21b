"""Signal health: within-group spread and zero-spread share per component, and the EMF rendering."""

from __future__ import annotations

import io
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from environments.wordle.game import WordleEnv
from mtrl.envs import EpisodeResult
from mtrl.health import signal_health


def ep(reward: float, **components: float) -> EpisodeResult:
    return EpisodeResult(reward=reward, components=components)


def test_spread_and_zero_share() -> None:
    groups = [
        [ep(1.0, a=1.0, b=0.0), ep(0.0, a=0.0, b=0.0)],  # a varies (std 0.5), b flat
        [ep(2.0, a=1.0, b=0.0), ep(2.0, a=1.0, b=0.0)],  # everything flat
    ]
    report = signal_health.compute(groups)
    assert (report.groups, report.episodes, report.skipped_groups) == (2, 4, 0)
    assert report.aggregate.mean_spread == pytest.approx(0.25)
    assert report.aggregate.zero_spread_share == 0.5
    assert report.components["a"].mean_spread == pytest.approx(0.25)
    assert report.components["b"].zero_spread_share == 1.0
    assert report.components["b"].mean == 0.0
    assert report.warnings == ["'b' is constant within 100% of groups: it gives GRPO almost no learning signal"]


def test_singletons_are_skipped_and_mappings_accepted() -> None:
    report = signal_health.compute([[{"reward": 1.0}], [{"reward": 1.0, "components": {"x": 2}}, {"reward": 3.0}]])
    assert report.skipped_groups == 1
    assert report.aggregate.groups == 1
    assert report.aggregate.mean_spread == pytest.approx(1.0)
    assert report.components["x"].groups == 0  # reported by only one episode of the group


def test_no_measurable_group_is_a_warning_and_bad_values_are_errors() -> None:
    assert signal_health.compute([[ep(1.0)]]).warnings == [
        "no group has two or more episodes: within-group spread cannot be measured"
    ]
    with pytest.raises(ValueError, match="non-finite"):
        signal_health.compute([[ep(float("nan")), ep(1.0)]])
    with pytest.raises(ValueError, match="component 'a'"):
        signal_health.compute([[ep(1.0, a=math.inf), ep(1.0, a=0.0)]])


@given(st.lists(st.lists(st.floats(-10, 10), min_size=2, max_size=6), min_size=1, max_size=8))
def test_spread_is_bounded_and_zero_only_for_constant_groups(groups: list[list[float]]) -> None:
    report = signal_health.compute([[{"reward": value} for value in group] for group in groups])
    flat = sum(1 for group in groups if max(group) - min(group) <= 1e-9)
    assert report.aggregate.zero_spread_share == pytest.approx(flat / len(groups))
    assert 0 <= report.aggregate.mean_spread <= 10


def test_wordle_groups_have_signal_in_every_component() -> None:
    openers = [["raise", "beach"], ["fuzzy", "beach"], ["raise"], ["xyzzy"], ["cloth", "bench", "beach"]]
    groups = []
    for answer in ("beach", "crane"):
        group = []
        for actions in openers:
            env = WordleEnv(verbose=False)
            env.reset({"prompt": "", "answer": answer})
            for action in actions:
                if not env.done:
                    env.step(action)
            group.append(env.result())
        groups.append(group)
    report = signal_health.compute(groups)
    assert report.warnings == []
    assert set(report.components) == {"outcome", "shaping"}
    assert report.components["shaping"].mean_spread > 0


def test_emf_documents() -> None:
    report = signal_health.compute([[ep(1.0, a=1.0), ep(0.0, a=1.0)]])
    docs = signal_health.to_emf(report, dimensions={"RunId": "run-1", "Environment": "wordle"}, timestamp_ms=123)
    assert [doc["Component"] for doc in docs] == ["reward", "a"]
    for doc in docs:
        directive = doc["_aws"]["CloudWatchMetrics"][0]
        assert doc["_aws"]["Timestamp"] == 123
        assert directive["Namespace"] == signal_health.EMF_NAMESPACE
        assert directive["Dimensions"] == [["RunId", "Environment", "Component"]]
        for dimension in directive["Dimensions"][0]:
            assert isinstance(doc[dimension], str)
        for metric in directive["Metrics"]:
            assert math.isfinite(doc[metric["Name"]])
    assert docs[1]["ZeroSpreadShare"] == 1.0
    stream = io.StringIO()
    assert signal_health.emit_emf(report, dimensions={"RunId": "r"}, stream=stream) == 2
    assert [json.loads(line)["Component"] for line in stream.getvalue().splitlines()] == ["reward", "a"]
    with pytest.raises(ValueError, match="non-empty"):
        signal_health.to_emf(report, dimensions={"RunId": ""})
