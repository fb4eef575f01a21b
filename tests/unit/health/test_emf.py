"""The one environment-side metrics writer: what every driver publishes for its scored episodes."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any, Literal

from mtrl.contracts.environment import EpisodeResult
from mtrl.health.emf import EPISODES_NAMESPACE, EpisodeMetrics


@dataclass
class Episode:
    result: EpisodeResult | None
    status: Literal["completed", "timeout", "error"] = "completed"
    turns: int = 3
    hit_turn_limit: bool = False


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def by_namespace(documents: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for document in documents:
        found.setdefault(document["_aws"]["CloudWatchMetrics"][0]["Namespace"], []).append(document)
    return found


def result(reward: float, *, malformed: float = 0.0, evaluation: float | None = None) -> EpisodeResult:
    return EpisodeResult(
        reward=reward,
        components={"outcome": reward},
        metrics={"malformed_actions": malformed},
        success=reward > 0,
        evaluation=evaluation,
    )


def test_groups_publish_spread_evaluation_and_episode_shares_with_the_same_dimensions() -> None:
    stream = io.StringIO()
    writer = EpisodeMetrics("wordle", dimensions={"RunId": "r-1"}, stream=stream)
    groups = [
        [Episode(result(1.0, evaluation=1.0)), Episode(result(0.0, malformed=2, evaluation=0.0), hit_turn_limit=True)],
        [Episode(result(0.5, evaluation=1.0), turns=5), Episode(None, status="timeout", turns=1)],
    ]
    written = writer.publish(groups, timestamp_ms=5)
    documents = lines(stream)
    assert written == len(documents)
    namespaces = by_namespace(documents)
    assert set(namespaces) == {"mtrl/RewardSignal", "mtrl/Evaluation", EPISODES_NAMESPACE}
    (episodes,) = namespaces[EPISODES_NAMESPACE]
    assert episodes["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["Environment", "RunId"]]
    assert (episodes["Environment"], episodes["RunId"], episodes["Episodes"]) == ("wordle", "r-1", 4)
    assert episodes["MalformedShare"] == 1 / 3  # of the scored episodes
    assert episodes["CapHitShare"] == 1 / 4
    assert episodes["TimeoutShare"] == 1 / 4
    assert episodes["ErrorShare"] == 0.0
    assert episodes["MeanTurns"] == (3 + 3 + 5 + 1) / 4
    assert all(doc["Environment"] == "wordle" and doc["RunId"] == "r-1" for doc in documents)


def test_a_single_episode_has_no_spread_but_still_publishes_its_figures() -> None:
    stream = io.StringIO()
    EpisodeMetrics("sop_support", stream=stream).publish([[Episode(result(0.2, evaluation=0.0))]])
    namespaces = by_namespace(lines(stream))
    assert "mtrl/RewardSignal" not in namespaces
    assert namespaces[EPISODES_NAMESPACE][0]["Episodes"] == 1
    assert namespaces["mtrl/Evaluation"][0]["RewardMean"] == 0.2


def test_nothing_is_written_for_no_episodes() -> None:
    stream = io.StringIO()
    assert EpisodeMetrics("wordle", stream=stream).publish([]) == 0
    assert stream.getvalue() == ""
