"""The one builder of signal rows (``mtrl.health.rows``): whatever a backend's source, its rows read back."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from mtrl.contracts.environment import EpisodeResult
from mtrl.health.episodes import EpisodeStatus
from mtrl.health.rows import episode_row, merged, signal_row
from mtrl.health.signals import SignalHeader, SignalRow, parse_signals, render_signals


@dataclass(frozen=True)
class Episode:
    result: EpisodeResult | None
    status: EpisodeStatus = "completed"
    turns: int = 2
    hit_turn_limit: bool = False


@dataclass(frozen=True)
class TruncatedEpisode(Episode):
    truncated: bool = False


def _read_back(row: SignalRow) -> SignalRow:
    return parse_signals(render_signals(SignalHeader(planned_steps=1), [row])).rows[0]


def test_figures_that_are_not_finite_numbers_are_unknown_and_shares_stay_within_bounds() -> None:
    row = signal_row(
        3,
        {
            "reward_mean": math.nan,
            "kl": math.inf,
            "grad_norm": True,
            "entropy": "high",
            "mean_turns": 4,
            "malformed_share": 1.0000000000000002,  # a mean of shares, summed in floating point
            "zero_spread_share": -1e-17,
            "not_a_field": 1.0,
        },
        time="2026-01-01T00:00:00Z",
        extra={"episodes": 7},
    )
    assert row.to_dict() == {
        "step": 3,
        "time": "2026-01-01T00:00:00Z",
        "zero_spread_share": 0.0,
        "malformed_share": 1.0,
        "mean_turns": 4.0,
        "episodes": 7,
    }
    assert _read_back(row) == row


def test_a_steps_episodes_grouped_by_task_make_its_row() -> None:
    groups = [
        [Episode(EpisodeResult(reward=1.0), turns=4), Episode(EpisodeResult(reward=0.0), hit_turn_limit=True)],
        [Episode(EpisodeResult(reward=0.5)), Episode(None, status="error")],
    ]
    row = episode_row(2, groups, time="2026-01-01T00:00:00Z")
    assert (row.step, row.time) == (2, "2026-01-01T00:00:00Z")
    assert row.reward_mean == pytest.approx(0.5)
    assert row.reward_spread_mean == pytest.approx(0.5)  # the second group has one scored episode: no spread
    assert row.zero_spread_share == 0.0
    assert row.cap_hit_share == pytest.approx(1 / 4)
    assert row.error_share == pytest.approx(1 / 4)
    assert row.truncation_share is None  # these episodes do not say whether they were truncated
    assert _read_back(row) == row


def test_episodes_that_say_whether_they_were_truncated_give_the_truncation_share() -> None:
    groups = [[TruncatedEpisode(EpisodeResult(reward=1.0), truncated=True), TruncatedEpisode(EpisodeResult(0.0))]]
    assert episode_row(1, groups).truncation_share == 0.5
    assert episode_row(1, []).to_dict() == {"step": 1}


def test_a_step_measured_by_two_sources_keeps_the_first_ones_figures() -> None:
    trainer = signal_row(1, {"reward_mean": 0.5, "truncation_share": 0.1}, time="2026-01-01T00:00:00Z")
    episodes = signal_row(1, {"reward_mean": 0.4, "truncation_share": None, "mean_turns": 3.0}, extra={"x": 1})
    row = merged(trainer, episodes)
    assert row.to_dict() == {
        "step": 1,
        "time": "2026-01-01T00:00:00Z",
        "reward_mean": 0.5,
        "mean_turns": 3.0,
        "truncation_share": 0.1,
    }
