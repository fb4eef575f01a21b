"""External evaluation (final answer, exact match, partial credit) and the densify rule, with hostile answers."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mtrl.envs.scoring import (
    STARVED_SHARE,
    densify_verdict,
    exact_match,
    extract_final_output,
    field_fraction,
    field_matches,
    zero_spread_share,
)
from mtrl.health import signal_health

EXPECTED = {"decision": "refund", "refund_amount": 49.99, "reason_code": "DEFECTIVE", "reference": "RF-1A2B3C4D"}


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ('Done.\n<final_output>{"decision": "refund"}</final_output>', {"decision": "refund"}),
        ('<final_output>\n```json\n{"a": 1}\n```\n</final_output>', {"a": 1}),
        ("<final_output>  {}  </final_output>", {}),
    ],
)
def test_one_tagged_json_object_is_the_answer(text: str, answer: dict[str, Any]) -> None:
    assert extract_final_output(text) == answer


@pytest.mark.parametrize(
    "text",
    [
        '{"decision": "refund"}',  # outside the tag: no answer
        "The decision is refund.",
        "<final_output>decision: refund</final_output>",  # malformed JSON
        '<final_output>["refund"]</final_output>',  # not an object
        '<final_output>{"a": NaN}</final_output>',  # not JSON
        '<final_output>{"a": 1}',  # unclosed
        '</final_output>{"a": 1}<final_output>',  # closed before it opens
        '<final_output>{"a": 1}</final_output> <final_output>{"a": 2}</final_output>',  # several: hedging
        '<final_output>{"a": 1}</final_output></final_output>',
        "<final_output>" + "[" * 5000 + "]" * 5000 + "</final_output>",
        '<FINAL_OUTPUT>{"a": 1}</FINAL_OUTPUT>',  # the tag is exact
    ],
)
def test_anything_else_is_no_answer(text: str) -> None:
    assert extract_final_output(text) is None


def test_another_tag_and_a_bad_tag_name() -> None:
    assert extract_final_output('<answer>{"x": 1}</answer>', tag="answer") == {"x": 1}
    with pytest.raises(ValueError, match="tag"):
        extract_final_output("", tag="a>b")


@given(st.text(), st.text())
def test_extraction_never_raises(before: str, after: str) -> None:
    for text in (before, f"{before}<final_output>{after}</final_output>", f"<final_output>{before}"):
        answer = extract_final_output(text)
        assert answer is None or isinstance(answer, dict)


def test_exact_match_normalises_each_field() -> None:
    answer = {"Decision": " Refund ", "refund_amount": "49.99", "reason_code": "defective", "reference": "rf-1a2b3c4d"}
    assert exact_match(EXPECTED, answer) == 1.0
    assert exact_match(EXPECTED, {**answer, "note": "extra fields are ignored"}) == 1.0


@pytest.mark.parametrize(
    "answer",
    [
        None,
        {},
        {**EXPECTED, "refund_amount": 49.98},
        {key: value for key, value in EXPECTED.items() if key != "reference"},  # a missing field is wrong
        {**EXPECTED, "refund_amount": True},
        {**EXPECTED, "reference": None},
    ],
)
def test_one_wrong_field_is_zero(answer: dict[str, Any] | None) -> None:
    assert exact_match(EXPECTED, answer) == 0.0


def test_partial_credit_is_the_share_of_right_fields() -> None:
    assert field_fraction(EXPECTED, {**EXPECTED, "reference": "RF-WRONG"}) == 0.75
    assert field_fraction(EXPECTED, None) == 0.0
    assert field_matches(EXPECTED, {"decision": "REFUND"}) == {
        "decision": True,
        "refund_amount": False,
        "reason_code": False,
        "reference": False,
    }
    with pytest.raises(ValueError, match="at least one"):
        field_fraction({}, {})
    with pytest.raises(ValueError, match="at least one"):
        exact_match({}, {})


answers = st.dictionaries(
    st.sampled_from([*EXPECTED, "other"]),
    st.sampled_from([*EXPECTED.values(), "refund", "49.99", None, 0, "x"]),
)


@given(answers)
def test_exact_match_is_one_exactly_when_every_field_is_right(answer: dict[str, Any]) -> None:
    fraction = field_fraction(EXPECTED, answer)
    assert 0.0 <= fraction <= 1.0
    assert exact_match(EXPECTED, answer) == (1.0 if fraction == 1.0 else 0.0)


# --- when to densify --------------------------------------------------------------------------------------------

# Four tasks x four rollouts: the binary score is all-or-nothing, the partial one grades near misses.
BINARY = [[0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1], [0, 0, 1, 0]]
PARTIAL = [[0.5, 0.75, 0.25, 0.5], [0, 0.25, 0, 0.5], [1, 1, 1, 1], [0.75, 0.5, 1, 0.75]]


def test_zero_spread_share_is_signal_healths() -> None:
    assert zero_spread_share(BINARY) == 0.75
    assert zero_spread_share(PARTIAL) == 0.25
    report = signal_health.compute([{"reward": score} for score in group] for group in BINARY)
    assert zero_spread_share(BINARY) == report.aggregate.zero_spread_share
    assert zero_spread_share([[1.0], [0.0, 0.0]]) == 1.0  # single-rollout groups are left out
    with pytest.raises(ValueError, match="undefined"):
        zero_spread_share([[1.0], [0.0]])


def test_densify_only_when_the_binary_score_starves_grpo_and_the_partial_one_does_better() -> None:
    verdict = densify_verdict(BINARY, PARTIAL)  # constant in 3 of 4 groups: most of the batch is wasted
    assert verdict.densify
    assert (verdict.binary_share, verdict.partial_share) == (0.75, 0.25)
    assert "keep evaluating with the binary score" in verdict.reason
    half = densify_verdict([[0, 0], [1, 1], [0, 1], [1, 0]], [[0, 0.5], [1, 1], [0, 1], [1, 0]])
    assert half.densify  # exactly STARVED_SHARE starves
    assert STARVED_SHARE == 0.5
    separating = [[0, 1, 0], [1, 1, 0], [0, 0, 0], [1, 0, 1]]  # constant in 1 of 4 groups
    kept = densify_verdict(separating, [[0.1, 0.9, 0.2], [1, 0.8, 0.1], [0.2, 0.1, 0.3], [1, 0.2, 1]])
    assert not kept.densify
    assert "train on it as it is" in kept.reason
    useless = densify_verdict(BINARY, BINARY)
    assert not useless.densify
    assert "no better" in useless.reason


def test_the_starved_share_matches_the_binomial_reasoning() -> None:
    # Group size 8: a binary score is constant with probability p^8 + (1-p)^8; 50% is crossed near p = 8%.
    def constant(p: float) -> float:
        return p**8 + (1 - p) ** 8

    assert constant(0.08) > STARVED_SHARE > constant(0.09)
    assert constant(0.013) > signal_health.FLAT_WARNING_SHARE > constant(0.014)
