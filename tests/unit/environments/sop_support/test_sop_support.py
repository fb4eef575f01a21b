"""sop_support: fixtures, the reference solver's coverage of the SOP, the sample split, the tools and the sandbox."""

from __future__ import annotations

import csv
import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from environments.sop_support import EXAMPLE_ACTIONS, EXAMPLE_TASK, make_env, solve, tickets, validate_task
from environments.sop_support.data import FIXTURES, orders
from environments.sop_support.desk import record_id
from environments.sop_support.make_sample import sample_files, split_of
from environments.sop_support.sop import REASON_CODES, final_answer
from mtrl.envs.episode_state import open_states
from mtrl.envs.registry import load_spec
from mtrl.envs.rollout import run_episode
from mtrl.envs.tools import format_tool_call

SPEC = load_spec("sop_support")


def task(ticket_id: str) -> dict[str, Any]:
    return {"prompt": tickets()[ticket_id].text(), "info": {"ticket_id": ticket_id}}


def play(ticket_id: str, actions: list[str]) -> tuple[list[dict[str, str]], Any]:
    env = make_env()
    try:
        return run_episode(env, task(ticket_id), actions)
    finally:
        env.close()


def test_every_ticket_is_solved_by_the_reference_episode_with_reward_and_evaluation_1() -> None:
    assert len(tickets()) >= 40
    for ticket_id in tickets():
        _, result = play(ticket_id, list(solve(ticket_id).actions))
        assert result.problems() == []
        assert (result.reward, result.evaluation, result.success) == (1.0, 1.0, True), ticket_id
        assert result.components == {"fields": 1.0, "state": 1.0, "procedure": 1.0, "excess_calls": 0.0}


def test_every_branch_of_the_sop_is_covered_in_both_splits() -> None:
    splits = split_of()
    for split in ("train", "eval"):
        branches = Counter(solve(t).branch for t, s in splits.items() if s == split)
        assert set(branches) == set(REASON_CODES), (split, branches)
    assert Counter(splits.values()) == {"train": 36, "eval": 18}


def test_the_sample_files_are_what_make_sample_writes() -> None:
    # Stale when tickets, fixtures or the split change without `python -m environments.sop_support.make_sample`.
    for name, text in sample_files().items():
        assert (SPEC.path / "sample" / name).read_text(encoding="utf-8") == text, f"sample/{name} is stale"
    train = [json.loads(line) for line in (SPEC.path / "sample" / "train.jsonl").read_text().splitlines()]
    held = [json.loads(line) for line in (SPEC.path / "sample" / "eval.jsonl").read_text().splitlines()]
    ids = [row["metadata"]["info"]["ticket_id"] for row in train + held]
    assert sorted(ids) == sorted(tickets())  # every ticket once, the splits disjoint
    assert all(validate_task(row["metadata"]) == [] for row in train + held)


def test_fixtures_are_consistent() -> None:
    with (FIXTURES / "customers.csv").open(encoding="utf-8") as handle:
        customers = list(csv.DictReader(handle))
    emails = [row["email"] for row in customers]
    assert len(set(emails)) == len(emails)
    assert {row["status"] for row in customers} == {"active", "suspended"}
    with (FIXTURES / "shipments.csv").open(encoding="utf-8") as handle:
        shipments = {row["order_id"]: row for row in csv.DictReader(handle)}
    assert set(shipments) == set(orders())  # every order shipped once
    assert all((row["status"] == "delivered") == bool(row["delivered_on"]) for row in shipments.values())


def test_the_example_is_a_full_correct_episode() -> None:
    assert SPEC.smoke_check() == []
    assert list(solve("T001").actions) == EXAMPLE_ACTIONS
    transcript, result = SPEC.play(EXAMPLE_TASK, EXAMPLE_ACTIONS)
    assert result.evaluation == 1.0
    assert "RF-" in transcript[-3]["content"]  # the refund tool's answer carries the id the answer cites


@pytest.mark.parametrize(
    ("metadata", "problem"),
    [
        ({"prompt": "x"}, "'info' must be an object"),
        ({"prompt": "x", "info": {"ticket_id": 7}}, "must be a string"),
        ({"prompt": "x", "info": {"ticket_id": "T999"}}, "is not a sop_support ticket"),
        ({"info": {"ticket_id": "T001"}}, "'prompt' must be"),
    ],
)
def test_validate_task_names_the_problem(metadata: dict[str, Any], problem: str) -> None:
    problems = validate_task(metadata)
    assert any(problem in text for text in problems), problems
    with pytest.raises(ValueError, match="invalid"):
        SPEC.play(metadata, [])


def test_read_only_tools_replay_and_unknown_inputs_get_not_found() -> None:
    env = make_env()
    env.reset(task("T001"))
    email = tickets()["T001"].email
    first = env.step(format_tool_call("lookup_customer", {"email": email})).observation
    # The same input, written differently (case, spaces), gets the same recorded response.
    again = env.step(format_tool_call("lookup_customer", {"email": f"  {email.upper()} "})).observation
    assert first == again
    assert "C1005" in first
    missing = env.step(format_tool_call("lookup_customer", {"email": "nobody@example.org"})).observation
    assert '"error": "not_found"' in missing
    wrong = env.step(format_tool_call("track_shipment", {"order": "O5005"})).observation
    assert "unknown argument" in wrong
    assert "No tool call" in env.step("I will look into it.").observation
    env.close()


def test_the_sandbox_refuses_what_the_refund_system_refuses_and_changes_nothing() -> None:
    env = make_env()
    env.reset(task("T001"))  # order O5005, 49.00, lost in transit

    def refund(**arguments: Any) -> str:
        return env.step(format_tool_call("issue_refund", arguments)).observation

    assert "exceeds" in refund(order_id="O5005", amount=49.01, reason_code="LOST_IN_TRANSIT")
    assert "no order" in refund(order_id="O0000", amount=1, reason_code="LOST_IN_TRANSIT")
    assert "reason_code one of" in refund(order_id="O5005", amount=1, reason_code="GOODWILL")
    assert "positive" in refund(order_id="O5005", amount=-5, reason_code="LOST_IN_TRANSIT")
    assert "must be a number" in refund(order_id="O5005", amount=True, reason_code="LOST_IN_TRANSIT")
    assert "two decimals" in refund(order_id="O5005", amount="1.001", reason_code="LOST_IN_TRANSIT")
    assert env.records() == ()
    assert record_id("RF", "T001", "O5005") in refund(order_id="O5005", amount="49.00", reason_code="lost_in_transit")
    assert "already refunded" in refund(order_id="O5005", amount=1, reason_code="LOST_IN_TRANSIT")
    case = env.step(
        format_tool_call("create_case", {"customer_id": "C1001", "order_id": "O5005", "reason_code": "HIGH_VALUE"})
    )
    assert "does not belong" in case.observation
    assert env.records() == (("refund", "O5005", "49.00", "LOST_IN_TRANSIT"),)
    env.close()


def test_every_episode_gets_a_fresh_sandbox_and_close_frees_it() -> None:
    before = len(open_states())
    first = make_env()
    first.reset(task("T001"))
    first.step(solve("T001").actions[3])  # the refund
    second = make_env()
    second.reset(task("T001"))
    assert first.records() != second.records() == ()
    assert len(open_states()) == before + 2
    result = first.result()
    first.close()
    first.close()  # idempotent
    assert first.result() == result  # scoring after close sees the final state
    second.reset(task("T002"))  # a reset replaces (and frees) the previous sandbox
    second.close()
    assert len(open_states()) == before


def test_record_ids_cannot_be_read_off_the_ticket() -> None:
    ids = {solve(t).answer["reference"] for t in tickets()} - {None}
    assert len(ids) == sum(1 for t in tickets() if solve(t).answer["reference"])
    for ticket_id in tickets():
        reference = solve(ticket_id).answer["reference"]
        if reference:
            assert reference.split("-", 1)[1] not in tickets()[ticket_id].text().upper()


def test_a_tool_call_next_to_the_answer_is_not_run() -> None:
    actions = list(solve("T001").actions)
    answer = json.loads(actions[-1].removeprefix("<final_output>").removesuffix("</final_output>"))
    hedged = actions[3] + "\n" + final_answer(answer)  # refund and answer in one action: the refund is not run
    _, result = play("T001", [*actions[:3], hedged])
    assert result.components["state"] == 0.0
    assert result.evaluation == 0.0


@settings(max_examples=300, deadline=None)
@given(
    amount=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(),
        st.text(max_size=60),
        st.sampled_from(["1e999999", "9" * 50, "1e308", "-0", "0.001", "49.00", " 12.5 ", "1_000", "0x10", "NaN"]),
        st.none(),
        st.booleans(),
        st.lists(st.integers(), max_size=2),
    )
)
def test_any_amount_is_a_refund_or_an_error_observation_never_an_exception(amount: Any) -> None:
    env = make_env()
    env.reset(task("T001"))
    try:
        arguments = {"order_id": "O5005", "amount": amount, "reason_code": "LOST_IN_TRANSIT"}
        observation = env.step(
            json.dumps({"name": "issue_refund", "arguments": arguments}).join(["<tool_call>", "</tool_call>"])
        ).observation
        assert "refund_id" in observation or '"error"' in observation
        assert ("refund_id" in observation) == (env.records() != ())
    finally:
        env.close()


def test_result_is_valid_before_reset_and_scores_like_no_answer() -> None:
    # The contract: result() is valid at any time (the verifiers adapter scores a rollout whose task was refused).
    result = make_env().result()
    assert (result.reward, result.evaluation, result.success) == (0.0, 0.0, False)
    assert set(result.components) == {"fields", "state", "procedure", "excess_calls"}
    assert result.problems() == []
