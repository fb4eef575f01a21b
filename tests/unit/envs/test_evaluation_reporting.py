"""mtrl.health.evaluation: the one rule every report uses — the declared external evaluation, or success as the labelled
fallback — and the EMF line the reward workers publish beside the signal health."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace
from typing import Any

import pytest

from mtrl.contracts.environment import EpisodeResult
from mtrl.envs.registry import load_spec
from mtrl.health import evaluation


def test_the_declared_evaluation_is_the_score_not_the_reward_nor_success() -> None:
    result = EpisodeResult(reward=1.7, success=True, evaluation=0.0)  # shaped reward high, the answer wrong
    assert evaluation.score(result) == 0.0
    assert evaluation.figures([result]) == {"evaluation_mean": 0.0, "evaluation_measure": "evaluation"}


def test_without_an_evaluation_success_is_the_score_and_labelled_so() -> None:
    results = [EpisodeResult(reward=-0.5, success=False), EpisodeResult(reward=1.2, success=True)]
    assert [evaluation.score(r) for r in results] == [0.0, 1.0]
    assert evaluation.figures(results) == {"evaluation_mean": 0.5, "evaluation_measure": "success"}
    # One result without an evaluation makes the whole figure the fallback: never a silent mix presented as one.
    mixed = [EpisodeResult(reward=0.0, evaluation=1.0), EpisodeResult(reward=0.0, success=False)]
    assert evaluation.measure_of(mixed) == "success"
    assert evaluation.label("success").startswith("evaluation (= success")
    assert evaluation.label("evaluation") == "evaluation"


def test_describe_names_the_declared_evaluation_or_the_fallback() -> None:
    assert evaluation.describe(load_spec("wordle")) == {
        "measure": "evaluation",
        "description": load_spec("wordle").evaluation,
    }
    undeclared: Any = SimpleNamespace(evaluation=None)
    assert evaluation.describe(undeclared) == {"measure": "success", "description": evaluation.SUCCESS_FALLBACK}


def test_the_emf_line_carries_the_evaluation_beside_the_reward() -> None:
    stream = io.StringIO()
    results = [EpisodeResult(reward=1.5, evaluation=1.0), EpisodeResult(reward=0.5, evaluation=0.0)]
    assert evaluation.emit_emf(results, dimensions={"Environment": "x"}, stream=stream, timestamp_ms=7)
    (document,) = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert document["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["Environment", "Measure"]]
    assert document["_aws"]["Timestamp"] == 7
    assert (document["EvaluationMean"], document["RewardMean"], document["Episodes"]) == (0.5, 1.0, 2)
    assert document["Measure"] == "evaluation"
    assert not evaluation.emit_emf([], dimensions={}, stream=stream)


@pytest.mark.parametrize("env_id", ["wordle", "ask_to_code"])
def test_the_built_ins_declare_an_evaluation(env_id: str) -> None:
    assert evaluation.describe(load_spec(env_id))["measure"] == "evaluation"
