"""External evaluation separate from the reward, and the rule for when to densify the reward.

The SageMaker AI multi-turn RL best-practices post: build the evaluation first — a small function that scores what
matters at deployment (SOP-Bench: the final JSON answer inside ``<final_output>`` must equal the expected one in every
field: 1, else 0) — and train on the same rule by default. Densify (partial credit) only where the binary score gives
GRPO no signal: when every rollout of a task gets the same score, the group's advantages are all zero.

- ``extract_final_output(text, tag)``: the answer object, or ``None`` for no answer. An answer outside the
  tag is no answer; malformed JSON, a non-object, or **several tagged blocks** are no answer (several
  blocks would let a policy hedge with one answer per block and be scored on the best one);
- ``exact_match(expected, actual)``: 1.0 iff every expected field equals the answer's field after
  ``mtrl.envs.normalise.normalise`` (strings stripped, whitespace collapsed, casefolded; ``"12.50"`` equals
  ``12.5``; field names normalised the same way), else 0.0. Fields the answer adds beyond the expected ones
  are ignored; a missing field is wrong;
- ``field_fraction(expected, actual)``: the share of expected fields that are right (partial credit);
- ``zero_spread_share(groups)`` and ``densify_verdict(binary, partial)``: the zero-spread share of a score
  over groups of rollouts (``mtrl.health.signal_health``), and the rule "densify only when the binary score
  starves GRPO — it is constant in at least half the groups (``STARVED_SHARE``) — and the partial score is
  constant in fewer".

Why half, and not ``signal_health.FLAT_WARNING_SHARE`` (90%): that threshold flags a component that gives "almost
nothing"; the question here is whether most of the batch is wasted. With group size G and a policy that solves a task
with probability p, the binary score is constant in a group with probability p^G + (1-p)^G: at G = 8 that reaches 50%
once p falls below about 8% (or rises above 92%) — the early, hard-task regime the SageMaker AI multi-turn RL
best-practices post densifies for — and 90% only below about 1.3%, long after most groups stopped contributing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mtrl.envs.normalise import normalise, normalise_text
from mtrl.health import signal_health

MAX_ANSWER_CHARS = 64 * 1024
# The binary score starves GRPO when it is constant in at least this share of groups (see the module docstring).
STARVED_SHARE = 0.5
_TAG = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")


def _reject_constant(text: str) -> Any:
    raise ValueError(f"non-standard JSON constant {text}")


def extract_final_output(text: str, tag: str = "final_output") -> dict[str, Any] | None:
    """The JSON object inside exactly one ``<tag>…</tag>`` block of ``text``; ``None`` for no (valid) answer."""
    if not _TAG.match(tag):
        raise ValueError(f"not a tag name: {tag!r}")
    if not isinstance(text, str):
        return None
    opening, closing = f"<{tag}>", f"</{tag}>"
    if text.count(opening) != 1 or text.count(closing) != 1:
        return None
    start = text.index(opening) + len(opening)
    end = text.find(closing, start)
    if end < 0:
        return None
    body = text[start:end].strip()
    if body.startswith("```") and body.endswith("```") and len(body) >= 6:
        body = body[3:-3].strip()
        if body[:4].casefold() == "json":
            body = body[4:].strip()
    if len(body) > MAX_ANSWER_CHARS:
        return None
    try:
        document = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None
    return document if isinstance(document, dict) else None


def _normalised_fields(answer: Mapping[str, Any]) -> dict[str, Any]:
    return {str(normalise_text(str(name))): normalise(value) for name, value in answer.items()}


def field_matches(expected: Mapping[str, Any], actual: Mapping[str, Any] | None) -> dict[str, bool]:
    """Each expected field (by its given name) → whether the answer has it, equal after normalisation."""
    given = _normalised_fields(actual) if isinstance(actual, Mapping) else {}
    found: dict[str, bool] = {}
    for name, value in expected.items():
        key = str(normalise_text(str(name)))
        found[str(name)] = key in given and given[key] == normalise(value)
    return found


def exact_match(expected: Mapping[str, Any], actual: Mapping[str, Any] | None) -> float:
    """1.0 when every expected field is right (see the module docstring), else 0.0; no answer is 0.0."""
    if not expected:
        raise ValueError("exact_match needs at least one expected field")
    matches = field_matches(expected, actual)
    return 1.0 if all(matches.values()) else 0.0


def field_fraction(expected: Mapping[str, Any], actual: Mapping[str, Any] | None) -> float:
    """The share of expected fields the answer has right, in [0, 1]; no answer is 0.0."""
    if not expected:
        raise ValueError("field_fraction needs at least one expected field")
    matches = field_matches(expected, actual)
    return sum(matches.values()) / len(matches)


def zero_spread_share(groups: Iterable[Sequence[float]]) -> float:
    """Share of groups (rollouts of one task, two or more) in which every rollout got the same score."""
    report = signal_health.compute([{"reward": float(score)} for score in group] for group in groups)
    if report.aggregate.groups == 0:
        raise ValueError("no group has two or more scores: the zero-spread share is undefined")
    return report.aggregate.zero_spread_share


@dataclass(frozen=True)
class DensifyVerdict:
    """Whether a partial-credit reward is warranted, from the same rollouts scored both ways."""

    binary_share: float  # zero-spread share of the binary (evaluation) score
    partial_share: float  # zero-spread share of the partial-credit score
    densify: bool
    reason: str


def densify_verdict(binary: Iterable[Sequence[float]], partial: Iterable[Sequence[float]]) -> DensifyVerdict:
    """Densify only when the binary score starves GRPO (``STARVED_SHARE``) and the partial score is flat less often.

    ``binary`` and ``partial`` are the same recorded rollouts (groups of one task each) scored both ways.
    """
    binary_share = zero_spread_share(binary)
    partial_share = zero_spread_share(partial)
    if binary_share < STARVED_SHARE:
        reason = (
            f"the binary score separates the rollouts of most groups (constant in {binary_share:.0%}): "
            "train on it as it is"
        )
        return DensifyVerdict(binary_share, partial_share, False, reason)
    if partial_share >= binary_share:
        reason = (
            f"the binary score is constant in {binary_share:.0%} of groups and the partial one is no better "
            f"({partial_share:.0%}): densifying adds no signal; use tasks this policy sometimes solves"
        )
        return DensifyVerdict(binary_share, partial_share, False, reason)
    reason = (
        f"the binary score is constant in {binary_share:.0%} of groups, the partial one in {partial_share:.0%}: "
        "densify, and keep evaluating with the binary score"
    )
    return DensifyVerdict(binary_share, partial_share, True, reason)
