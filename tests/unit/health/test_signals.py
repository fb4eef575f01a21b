"""The signals file: header + rows, a partially written last line tolerated, every other fault named."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass

import pytest

from mtrl.contracts.environment import EpisodeResult
from mtrl.health.episodes import EpisodeStatus, episode_fields
from mtrl.health.signals import SignalHeader, SignalRow, SignalsError, parse_signals, render_signals

HEADER = '{"planned_steps": 10, "group_size": 4}\n'


def test_round_trip_keeps_every_known_field_and_drops_nulls() -> None:
    row = SignalRow(step=1, time="2026-01-01T00:00:00Z", reward_mean=0.5, zero_spread_share=0.25, kl=None)
    text = render_signals(SignalHeader(planned_steps=10, group_size=4), [row])
    assert (
        text
        == HEADER.replace(" ", "")
        + '{"step":1,"time":"2026-01-01T00:00:00Z","reward_mean":0.5,"zero_spread_share":0.25}\n'
    )
    parsed = parse_signals(text)
    assert parsed.rows == (row,)
    assert parsed.header == SignalHeader(planned_steps=10, group_size=4)
    assert not parsed.truncated_tail


def test_a_partially_written_last_line_is_left_out() -> None:
    text = HEADER + '{"step": 1, "reward_mean": 0.1}\n{"step": 2, "rew'
    parsed = parse_signals(text)
    assert [row.step for row in parsed.rows] == [1]
    assert parsed.truncated_tail


def test_a_complete_last_line_without_newline_is_read() -> None:
    assert [r.step for r in parse_signals(HEADER + '{"step": 1}').rows] == [1]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ('{"step": 1}\n', "first line must be the header"),
        (HEADER + "not json\n" + '{"step": 2}\n', "line 2: not JSON"),
        (HEADER + "[1, 2]\n", "line 2: each line must be a JSON object"),
        (HEADER + '{"step": 2}\n{"step": 2}\n', "line 3: step 2 does not follow step 2"),
        (HEADER + '{"step": 0}\n', r"'step' must be an integer in "),
        (HEADER + '{"step": true}\n', r"'step' must be an integer in "),
        (HEADER + '{"step": 1, "zero_spread_share": 1.5}\n', "must be within [0, 1]"),
        (HEADER + '{"step": 1, "reward_mean": "high"}\n', "'reward_mean' must be a number or null"),
        (HEADER + '{"step": 1, "kl": NaN}\n', "'kl' is not finite"),
        (HEADER + '{"step": 1, "time": "yesterday"}\n', "'time' is not ISO 8601"),
        ('{"planned_steps": -1}\n', r"'planned_steps' must be an integer in "),
        ('{"planned_steps": 3, "group_size": 0}\n', r"'group_size' must be an integer in "),
    ],
)
def test_bad_files_get_a_specific_error(text: str, message: str) -> None:
    with pytest.raises(SignalsError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_signals(text, source="s3://bucket/runs/r/signals.jsonl")


def test_unknown_fields_are_kept_aside_not_rejected() -> None:
    parsed = parse_signals(HEADER + json.dumps({"step": 1, "mean_action_tokens": 12}) + "\n")
    assert parsed.rows[0].extra == {"mean_action_tokens": 12}


def test_fuzzed_lines_raise_signals_error_or_parse_never_anything_else() -> None:
    import random

    rng = random.Random(5)
    good = HEADER + '{"step": 1, "reward_mean": 0.25, "time": "2026-01-01T00:00:00Z"}\n{"step": 2}\n'
    for _ in range(500):
        chars = list(good)
        for _ in range(rng.randint(1, 4)):
            chars[rng.randrange(len(chars))] = rng.choice('{}[]":,0123456789.-eEtnul \n')
        with contextlib.suppress(SignalsError):
            parse_signals("".join(chars))


@dataclass(frozen=True)
class Episode:
    result: EpisodeResult | None
    status: EpisodeStatus = "completed"
    turns: int = 2
    hit_turn_limit: bool = False


def test_episode_fields_of_one_step() -> None:
    groups = [
        [
            Episode(EpisodeResult(reward=1.0, success=True, metrics={"malformed_actions": 2.0}), turns=4),
            Episode(EpisodeResult(reward=0.0), turns=6, hit_turn_limit=True),
        ],
        [Episode(EpisodeResult(reward=0.5, evaluation=0.5)), Episode(EpisodeResult(reward=0.5, evaluation=0.5))],
        [Episode(None, status="error"), Episode(None, status="timeout", turns=0)],
    ]
    fields = episode_fields(groups)
    assert fields["reward_mean"] == pytest.approx(0.5)
    assert fields["reward_spread_mean"] == pytest.approx(0.25)  # std 0.5 and 0 over the two scored groups
    assert fields["zero_spread_share"] == pytest.approx(0.5)  # the all-failed group has no spread to measure
    assert fields["evaluation_mean"] == pytest.approx((1.0 + 0.0 + 0.5 + 0.5) / 4)  # success stands in when none
    assert fields["malformed_share"] == pytest.approx(0.25)
    assert fields["mean_turns"] == pytest.approx((4 + 6 + 2 + 2 + 2 + 0) / 6)
    assert fields["cap_hit_share"] == pytest.approx(1 / 6)
    assert fields["error_share"] == pytest.approx(1 / 6)
    assert fields["timeout_share"] == pytest.approx(1 / 6)
    assert SignalRow(step=1, **fields).zero_spread_share == 0.5


def test_episode_fields_of_nothing_scored_are_unknown() -> None:
    fields = episode_fields([[Episode(None, status="error")]])
    assert fields["reward_mean"] is None
    assert fields["zero_spread_share"] is None
    assert fields["error_share"] == 1.0
