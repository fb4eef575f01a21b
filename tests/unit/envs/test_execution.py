"""Verifiable execution: the real sandbox (``run_cases``) behind a per-episode cache keyed by content."""

from __future__ import annotations

import datetime

import pytest

from mtrl.envs.episode_state import EpisodeState
from mtrl.envs.execution import Execution, content_key
from mtrl.sandbox import Case, Check, Limits, Raises

ADD = "def total(rows):\n    return sum(row['amount'] for row in rows)\n"
CASES = (
    Case("test_total", (Check("total", ([{"amount": 2}, {"amount": 3}],), 5),)),
    Case("test_empty", (Check("total", ([],), 0),)),
)
LIMITS = Limits(timeout_s=20)


def test_same_program_and_cases_run_once_and_give_the_same_result() -> None:
    execution = Execution(LIMITS)
    first = execution.run_cases(ADD, CASES)
    assert first.status == "passed"
    assert first.pass_fraction == 1.0
    second = execution.run_cases(ADD, list(CASES))
    assert (execution.runs, execution.cache_hits) == (1, 1)
    assert second.to_dict() == first.to_dict()
    second.tests_passed = 0  # a caller mutating its copy changes nothing cached
    assert execution.run_cases(ADD, CASES).tests_passed == 2


def test_a_nondeterministic_program_is_scored_once_per_episode() -> None:
    coin = "import os\ndef flip():\n    return os.urandom(1)[0] % 2\n"
    cases = (Case("test_flip", (Check("flip", (), 1),)),)
    execution = Execution(LIMITS)
    verdicts = {execution.run_cases(coin, cases).status for _ in range(4)}
    assert verdicts <= {"passed", "failed"}
    assert len(verdicts) == 1  # re-scoring the same trajectory cannot flip its reward
    assert execution.runs == 1


def test_the_state_enters_as_input_so_a_different_state_is_a_different_run() -> None:
    schema = "CREATE TABLE payments (amount INTEGER);"
    state = EpisodeState(schema=schema, seed={"payments": [{"amount": 4}, {"amount": 6}]})
    execution = Execution(LIMITS)
    try:
        before = execution.run_cases(ADD, (Case("test_sum", (Check("total", (state.rows("payments"),), 10),)),))
        state.insert("payments", [{"amount": 1}])
        after = execution.run_cases(ADD, (Case("test_sum", (Check("total", (state.rows("payments"),), 10),)),))
    finally:
        state.close()
    assert (before.status, after.status) == ("passed", "failed")
    assert execution.runs == 2


def test_the_key_covers_program_inputs_expectations_names_and_limits() -> None:
    base = content_key(ADD, CASES, LIMITS)
    assert base == content_key(ADD, list(CASES), Limits(timeout_s=20))
    other_expect = (Case("test_total", (Check("total", ([{"amount": 2}, {"amount": 3}],), 6),)), CASES[1])
    variants = [
        content_key(ADD + "\n", CASES, LIMITS),
        content_key(ADD, CASES[:1], LIMITS),
        content_key(ADD, other_expect, LIMITS),
        content_key(ADD, (Case("renamed", CASES[0].checks), CASES[1]), LIMITS),
        content_key(ADD, CASES, Limits(timeout_s=21)),
        content_key(ADD, (Case("t", (Check("total", ((1,),), 1),)),), LIMITS),
        content_key(ADD, (Case("t", (Check("total", ([1],), 1),)),), LIMITS),  # tuple and list differ
        content_key(ADD, (Case("t", (Check("total", (), Raises("ValueError")),)),), LIMITS),
        content_key(ADD, (Case("t", (Check("total", (datetime.date(2024, 1, 1),), 1),)),), LIMITS),
    ]
    assert len({base, *variants}) == len(variants) + 1


def test_bad_cases_are_refused_as_the_sandbox_refuses_them() -> None:
    with pytest.raises(ValueError, match="at least one case"):
        Execution(LIMITS).run_cases(ADD, ())
    with pytest.raises(TypeError, match="plain data"):
        Execution(LIMITS).run_cases(ADD, (Case("t", (Check("total", (object(),), 1),)),))
