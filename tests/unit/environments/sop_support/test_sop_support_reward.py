"""sop_support's reward cannot be gamed: more tool calls never pay, answering early never beats the procedure, an
answer outside ``<final_output>`` scores like no answer, and the evaluation stays exact match (AWS's
MTRL best practices)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from environments.sop_support import make_env, solve, tickets
from environments.sop_support.data import orders
from environments.sop_support.desk import CASE_REASONS, REFUND_REASONS
from environments.sop_support.env import EXCESS_CAP, MAX_TURNS, WEIGHTS
from environments.sop_support.sop import REASON_CODES, final_answer
from mtrl.contracts.environment import EpisodeResult, closing
from mtrl.envs.normalise import canonical_key
from mtrl.envs.registry import load_spec
from mtrl.envs.rollout import run_episode
from mtrl.envs.tools import ToolCall, format_tool_call, parse_tool_call
from mtrl.local.agents import agent_for
from mtrl.local.policy import LogLinearPolicy

TICKETS = sorted(tickets())
TOOLS = ("lookup_customer", "get_order_history", "track_shipment", "get_return_policy", "issue_refund", "create_case")
ORDERS = sorted(orders())
CUSTOMERS = sorted({order["customer_id"] for order in orders().values()})
VALUES = st.one_of(
    st.sampled_from(ORDERS),
    st.sampled_from(CUSTOMERS),
    st.sampled_from(sorted({t.email for t in tickets().values()})),
    st.sampled_from(["apparel", "footwear", "electronics", "camping", "clearance"]),
    st.sampled_from(REASON_CODES),
    st.sampled_from([1, 12.5, 49.0, 99999, -1, 0, "all", None, True]),
    st.text(max_size=12),
)
DECISION_OF = {code: "refund" if code in REFUND_REASONS else "escalate" if code in CASE_REASONS else "deny"
               for code in REASON_CODES}  # fmt: skip
ARGUMENT_NAMES = ("email", "customer_id", "order_id", "category", "amount", "reason_code", "note")


def play(ticket_id: str, actions: list[str]) -> EpisodeResult:
    env = make_env()
    try:
        return run_episode(env, {"prompt": "", "info": {"ticket_id": ticket_id}}, actions)[1]
    finally:
        env.close()


def required_calls(ticket_id: str) -> set[tuple[str, str]]:
    calls = [parse_tool_call(action) for action in solve(ticket_id).actions]
    return {(c.name, canonical_key(c.arguments)) for c in calls if isinstance(c, ToolCall)}


@st.composite
def tool_calls(draw: st.DrawFn) -> str:
    """A tool call a reward-seeking policy might try: any tool, plausible or junk arguments, or a malformed call."""
    kind = draw(st.sampled_from(["call", "call", "call", "malformed", "unknown"]))
    if kind == "malformed":
        return draw(st.sampled_from(["<tool_call>{oops</tool_call>", "<tool_call>[]</tool_call>", "<tool_call>"]))
    name = draw(st.sampled_from(TOOLS)) if kind == "call" else draw(st.sampled_from(["refund_all", "sql", "admin"]))
    keys = draw(st.lists(st.sampled_from(ARGUMENT_NAMES), min_size=1, max_size=3, unique=True))
    return format_tool_call(name, {key: draw(VALUES) for key in keys})


def _insert(base: list[str], extras: list[str], positions: list[int]) -> list[str]:
    actions = list(base)
    for extra, position in zip(extras, positions, strict=False):
        actions.insert(min(position, len(actions) - 1), extra)  # always before the final answer
    return actions


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ticket_id=st.sampled_from(TICKETS),
    extras=st.lists(tool_calls(), min_size=1, max_size=6),
    positions=st.lists(st.integers(0, 6), min_size=6, max_size=6),
)
def test_extra_tool_calls_never_raise_the_reference_reward(
    ticket_id: str, extras: list[str], positions: list[int]
) -> None:
    reference = list(solve(ticket_id).actions)
    actions = _insert(reference, extras, positions)
    result = play(ticket_id, actions)
    assert result.reward < play(ticket_id, reference).reward == 1.0  # every extra call costs something
    assert result.evaluation in (0.0, 1.0)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ticket_id=st.sampled_from(TICKETS), data=st.data())
def test_calls_the_sop_does_not_need_never_raise_any_trajectorys_reward(ticket_id: str, data: st.DataObject) -> None:
    """Any trajectory (a random mix of the SOP's own calls and other calls, then some answer) scores no better
    with more calls the SOP does not need inserted anywhere before its answer."""
    solution = solve(ticket_id)
    keep = data.draw(st.lists(st.booleans(), min_size=6, max_size=6))
    calls = [a for a, k in zip(solution.actions[:-1], keep, strict=False) if k] + data.draw(
        st.lists(tool_calls(), max_size=5)
    )
    answers = [solution.actions[-1], final_answer({**solution.answer, "reason_code": "DEFECTIVE"}), "no answer", ""]
    trajectory = [*calls, data.draw(st.sampled_from(answers))]
    extras = data.draw(st.lists(tool_calls(), min_size=1, max_size=5))
    positions = data.draw(st.lists(st.integers(0, 10), min_size=5, max_size=5))
    needed = required_calls(ticket_id)

    def unneeded(action: str) -> bool:
        call = parse_tool_call(action)
        return not isinstance(call, ToolCall) or (call.name, canonical_key(call.arguments)) not in needed

    more = _insert(trajectory, [e for e in extras if unneeded(e)], positions)
    assert play(ticket_id, more).reward <= play(ticket_id, trajectory).reward


@pytest.mark.parametrize("ticket_id", TICKETS)
def test_answering_early_never_beats_following_the_procedure(ticket_id: str) -> None:
    solution = solve(ticket_id)
    calls = list(solution.actions[:-1])
    full = play(ticket_id, list(solution.actions)).reward
    # The best early answer there is: the right one (as if guessed), or what each branch of the SOP would say.
    candidates = [solution.answer] + [
        {
            "decision": DECISION_OF[code],
            "refund_amount": solution.answer["refund_amount"],
            "reason_code": code,
            "reference": solution.answer["reference"],
        }
        for code in REASON_CODES
    ]
    for cut in range(len(calls)):  # every proper prefix of the procedure
        for answer in candidates:
            early = play(ticket_id, [*calls[:cut], final_answer(answer)])
            assert early.reward < full, (cut, answer, early)
            assert early.components["procedure"] < 1.0 or early.components["state"] < 1.0


HOSTILE = [
    '{"decision": "refund", "refund_amount": 49.0, "reason_code": "LOST_IN_TRANSIT", "reference": "%s"}',
    '```json\n{"decision": "refund", "refund_amount": 49.0, "reason_code": "LOST_IN_TRANSIT", "reference": "%s"}\n```',
    '<final_answer>{"decision": "refund", "refund_amount": 49.0, "reason_code": "LOST_IN_TRANSIT", "reference": "%s"}'
    "</final_answer>",
    '<FINAL_OUTPUT>{"decision": "refund", "refund_amount": 49.0, "reason_code": "LOST_IN_TRANSIT", "reference": "%s"}'
    "</FINAL_OUTPUT>",
    '<final_output>{"decision": "refund", "refund_amount": 49.0, "reason_code": "LOST_IN_TRANSIT", "reference": "%s"}',
    '<final_output>{"decision": "refund"}</final_output> <final_output>{"decision": "refund", "refund_amount": 49.0, '
    '"reason_code": "LOST_IN_TRANSIT", "reference": "%s"}</final_output>',
    '<final_output>[{"decision": "refund", "refund_amount": 49.0, "reason_code": "LOST_IN_TRANSIT", "reference": "%s"}]'
    "</final_output>",
    '<final_output>{"decision": "refund", "refund_amount": NaN, "reason_code": "LOST_IN_TRANSIT", "reference": "%s"}'
    "</final_output>",
    "<final_output>refund 49.00 LOST_IN_TRANSIT %s</final_output>",
    "<final_output></final_output>",
    "<final_output>" + "{" * 5000 + "%s</final_output>",
    "%s" + "x" * 100_000,
]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_an_answer_outside_final_output_scores_like_no_answer(hostile: str) -> None:
    solution = solve("T001")  # refund of 49.00, LOST_IN_TRANSIT
    calls = list(solution.actions[:-1])
    text = hostile.replace("%s", str(solution.answer["reference"]))
    unanswered = play("T001", calls)
    hostile_result = play("T001", [*calls, text])
    assert hostile_result.components == unanswered.components
    assert hostile_result.reward == unanswered.reward <= 0.0
    assert hostile_result.evaluation == 0.0
    assert hostile_result.metrics["answered"] == 0.0


def test_out_of_turns_scores_like_no_answer_and_the_weights_bound_the_reward() -> None:
    solution = solve("T001")
    stalling = ["Let me think."] * MAX_TURNS + [solution.actions[-1]]
    result = play("T001", stalling)
    assert result.metrics["answered"] == 0.0
    assert result.reward == 0.0
    spam = [solution.actions[0]] * MAX_TURNS
    assert play("T001", spam).reward == pytest.approx(-WEIGHTS["excess_calls"])  # capped at EXCESS_CAP calls
    assert MAX_TURNS - 1 > EXCESS_CAP
    assert sum(weight for name, weight in WEIGHTS.items() if name != "excess_calls") == pytest.approx(1.0)


def test_the_evaluation_is_exact_match_while_the_reward_gives_partial_credit() -> None:
    solution = solve("T001")
    for field, wrong in [
        ("refund_amount", 48.99),
        ("reason_code", "DEFECTIVE"),
        ("decision", "deny"),
        ("reference", None),
    ]:
        result = play("T001", [*solution.actions[:-1], final_answer({**solution.answer, field: wrong})])
        assert result.evaluation == 0.0, field
        assert result.components["fields"] == 0.75
        assert 0.0 < result.reward < 1.0
    # Normalised equality is still equality: "49.00" is 49.0, case and spaces do not matter.
    relaxed = {**solution.answer, "refund_amount": "49.00", "decision": " REFUND "}
    assert play("T001", [*solution.actions[:-1], final_answer(relaxed)]).evaluation == 1.0
    # The right answer with an extra record in the sandbox (a speculative case too) is not accepted.
    case = format_tool_call("create_case", {"customer_id": "C1005", "order_id": "O5005", "reason_code": "HIGH_VALUE"})
    extra = play("T001", [*solution.actions[:-1], case, solution.actions[-1]])
    assert extra.components["fields"] == 1.0
    assert extra.evaluation == 0.0
    assert json.loads(json.dumps(extra.to_dict()))["evaluation"] == 0.0


def test_the_top_of_the_reward_is_the_evaluation() -> None:
    """A wrong answer scores at most 0.6·0.75 + 0.2 + 0.2 = 0.85 (or 0.8 with wrong records), so any reward above
    0.85 is an exact match: a policy that maximises the reward is driven into what the evaluation accepts. Checked on
    rollouts of the local agent's candidates under random policies (random weights, so every kind of behaviour)."""
    assert 1.0 - WEIGHTS["excess_calls"] > WRONG_ANSWER_CEILING  # the band exists: exact with 4 excess calls is above
    agent = agent_for("sop_support")
    rng = np.random.default_rng(11)
    spec = load_spec("sop_support")
    seen = {"exact": 0, "wrong": 0}
    for index in range(400):
        ticket_id = TICKETS[index % len(TICKETS)]
        policy = LogLinearPolicy(agent.feature_names)
        policy.theta = rng.normal(0.0, 3.0, len(agent.feature_names))
        task = {"prompt": "", "info": {"ticket_id": ticket_id}}
        with closing(spec.make()) as env:
            episode = agent.start(task, env.reset(task), rng)
            while not env.done:
                options, features = episode.options()
                action = options[policy.decide(features, rng).index]
                episode.observe(action, env.step(action).observation)
            result = env.result()
        assert -WEIGHTS["excess_calls"] <= result.reward <= 1.0
        if result.reward > WRONG_ANSWER_CEILING:
            assert result.evaluation == 1.0, (ticket_id, result)
        seen["exact" if result.evaluation == 1.0 else "wrong"] += 1
    assert min(seen.values()) > 20  # both kinds were reached


WRONG_ANSWER_CEILING = WEIGHTS["fields"] * 0.75 + WEIGHTS["state"] + WEIGHTS["procedure"]
