"""The sop_support agent: each turn, one tool call the SOP allows or a final answer built from what was observed.

The agent knows the ticket (what the policy reads in the prompt) and what the tools answered so far, never the
expected answer. Candidates each turn:

- lookups: ``lookup_customer(email)``, ``track_shipment(order_id)``, and once their arguments are known
  ``get_order_history(customer_id)`` and ``get_return_policy(category)``;
- actions: ``issue_refund`` for each refund reason with the amount the SOP's arithmetic gives from the observed
  price (and fee), ``create_case`` for each case reason (once the customer id is known);
- answers: one per reason code of the SOP, with the decision it implies, the amount computed from what was seen
  (0 when unknown) and the id of the refund or case this episode created (null when none).

The facts seen so far narrow the reason codes still possible (``possible_codes``: the SOP's decision points
in order). Features, in [0, 1]: ``lookup_next`` (the SOP's next lookup while the decision is open),
``lookup_other`` (a new lookup out of order or no longer needed), ``lookup_repeat`` (made before),
``act_determined`` (the refund or case the observed facts call for, with the right amount) / ``act_other``,
``answer_determined`` (the facts leave only this code, and the record it names exists when it needs one),
``answer_possible`` (not ruled out yet, but not determined either), ``answer_ruled_out``, and
``answer_progress`` (share of the four lookups made, on answers). Untrained (all weights 0) the policy picks
uniformly and mostly answers too early; GRPO learns to look up first, act once determined, then answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from decimal import Decimal
from functools import cache
from typing import Any

import numpy as np

from mtrl.envs.registry import load_spec
from mtrl.envs.tools import format_tool_call
from mtrl.local.policy import FloatArray

FEATURES: tuple[str, ...] = (
    "lookup_next",
    "lookup_other",
    "lookup_repeat",
    "act_determined",
    "act_other",
    "answer_determined",
    "answer_possible",
    "answer_ruled_out",
    "answer_progress",
)
_LOOKUPS = 4


@cache
def _env() -> Any:
    """The environment package (one source: its tickets, SOP constants and arithmetic, tool-call syntax)."""
    return load_spec("sop_support").module


def _sop() -> Any:
    return _env().sop


def _call(name: str, **arguments: Any) -> str:
    return format_tool_call(name, arguments)


class Facts:
    """What the tools have answered in this episode (``None``: not asked yet; ``{}``: asked, not found)."""

    def __init__(self) -> None:
        self.customer: dict[str, Any] | None = None
        self.history: dict[str, Any] | None = None
        self.shipment: dict[str, Any] | None = None
        self.policy: dict[str, Any] | None = None
        self.refund_id: str | None = None
        self.case_id: str | None = None

    def order(self, order_id: str) -> dict[str, Any] | None:
        orders = (self.history or {}).get("orders", [])
        return next((o for o in orders if isinstance(o, dict) and o.get("order_id") == order_id), None)


def settlement(facts: Facts, ticket: Any) -> tuple[str, Decimal] | None:
    """The SOP's (reason code, refund amount) once the facts determine them; ``None`` while they do not."""
    sop = _sop()
    codes = possible_codes(facts, ticket)
    if len(codes) != 1:
        return None
    code = next(iter(codes))
    order = facts.order(ticket.order_id)
    if code in ("LOST_IN_TRANSIT", "DEFECTIVE"):
        return code, sop.settle_amount(order["price"]) if order else Decimal(0)
    if code == "WITHIN_WINDOW" and order and facts.policy:
        return code, sop.settle_amount(order["price"], facts.policy["restocking_fee_pct"])
    return code, Decimal(0)


def possible_codes(facts: Facts, ticket: Any) -> set[str]:  # noqa: PLR0911 - one return per SOP decision point
    """The reason codes not yet ruled out by the facts, walking the SOP's decision points in order."""
    sop = _sop()
    codes = set(sop.REASON_CODES)
    if facts.customer is None:
        return codes
    if "customer_id" not in facts.customer:
        return {"UNVERIFIED"}
    if facts.customer.get("status") == "suspended":
        return {"ACCOUNT_HOLD"}
    codes -= {"UNVERIFIED", "ACCOUNT_HOLD"}
    if facts.history is None:
        return codes
    order = facts.order(ticket.order_id)
    if order is None:
        return {"ORDER_NOT_FOUND"}
    codes.discard("ORDER_NOT_FOUND")
    if facts.shipment is None:
        return codes
    status = facts.shipment.get("status")
    if status == "in_transit":
        return {"IN_TRANSIT"}
    if status == "lost":
        return {"HIGH_VALUE" if sop.settle_amount(order["price"]) > sop.HIGH_VALUE_LIMIT else "LOST_IN_TRANSIT"}
    codes -= {"IN_TRANSIT", "LOST_IN_TRANSIT"}
    if facts.policy is None or "return_window_days" not in facts.policy:
        return codes
    days = sop.days_between(facts.shipment["delivered_on"], ticket.today)
    if ticket.reason == "defective" and days <= int(facts.policy["defect_window_days"]):
        amount, code = sop.settle_amount(order["price"]), "DEFECTIVE"
    elif days <= int(facts.policy["return_window_days"]):
        amount, code = sop.settle_amount(order["price"], facts.policy["restocking_fee_pct"]), "WITHIN_WINDOW"
    else:
        return {"OUTSIDE_WINDOW"}
    return {"HIGH_VALUE" if amount > sop.HIGH_VALUE_LIMIT else code}


class SopSupportEpisode:
    def __init__(self, ticket: Any) -> None:
        self.ticket = ticket
        self.facts = Facts()
        self.made: set[str] = set()
        self.kinds: dict[str, str] = {}  # action text → the tool it calls ("answer" for answers)

    def _lookups(self) -> list[tuple[str, str, bool]]:
        """(tool, action, next): ``next`` marks the SOP's next lookup while the decision is still open."""
        ticket, facts = self.ticket, self.facts
        open_decision = len(possible_codes(facts, ticket)) > 1
        found = [
            ("lookup_customer", _call("lookup_customer", email=ticket.email), facts.customer is None),
            ("track_shipment", _call("track_shipment", order_id=ticket.order_id), facts.history is not None),
        ]
        if facts.customer and "customer_id" in facts.customer:
            action = _call("get_order_history", customer_id=facts.customer["customer_id"])
            found.append(("get_order_history", action, True))
        order = facts.order(ticket.order_id)
        if order:
            action = _call("get_return_policy", category=order["category"])
            found.append(("get_return_policy", action, facts.shipment is not None))
        return [(tool, action, step and open_decision) for tool, action, step in found]

    def _acts(self) -> list[tuple[str, str, bool]]:
        sop, ticket, facts = _sop(), self.ticket, self.facts
        determined = settlement(facts, ticket)
        acts: list[tuple[str, str, bool]] = []
        order = facts.order(ticket.order_id)
        if order:
            amounts = {
                "DEFECTIVE": sop.settle_amount(order["price"]),
                "LOST_IN_TRANSIT": sop.settle_amount(order["price"]),
            }
            fee = facts.policy.get("restocking_fee_pct") if facts.policy else None
            amounts["WITHIN_WINDOW"] = sop.settle_amount(order["price"], fee if fee is not None else 0)
            for code, amount in amounts.items():
                action = _call("issue_refund", order_id=ticket.order_id, amount=float(amount), reason_code=code)
                right = determined == (code, amount) and facts.refund_id is None
                acts.append(("issue_refund", action, right))
        if facts.customer and "customer_id" in facts.customer:
            for code in ("ACCOUNT_HOLD", "HIGH_VALUE"):
                customer_id = facts.customer["customer_id"]
                action = _call("create_case", customer_id=customer_id, order_id=ticket.order_id, reason_code=code)
                right = determined is not None and determined[0] == code and facts.case_id is None
                acts.append(("create_case", action, right))
        return acts

    def _answers(self) -> list[tuple[str, str, bool, bool]]:
        sop, ticket, facts = _sop(), self.ticket, self.facts
        possible = possible_codes(facts, ticket)
        determined = settlement(facts, ticket)
        order = facts.order(ticket.order_id)
        answers: list[tuple[str, str, bool, bool]] = []
        for code in sop.REASON_CODES:
            if code in sop.REFUND_REASONS:
                decision, reference = "refund", facts.refund_id
                amount = determined[1] if determined and determined[0] == code else Decimal(0)
                if not amount and order:
                    amount = sop.settle_amount(order["price"])
            elif code in sop.CASE_REASONS:
                decision, reference, amount = "escalate", facts.case_id, Decimal(0)
            else:
                decision, reference, amount = "deny", None, Decimal(0)
            answer = {"decision": decision, "refund_amount": float(amount), "reason_code": code, "reference": reference}
            needs_record = code in sop.REFUND_REASONS or code in sop.CASE_REASONS
            settled = determined is not None and determined[0] == code and (reference is not None or not needs_record)
            answers.append((code, sop.final_answer(answer), settled, code in possible))
        return answers

    def options(self) -> tuple[Sequence[str], FloatArray]:
        actions: list[str] = []
        rows: list[list[float]] = []
        for tool, action, step in self._lookups():
            made = action in self.made
            actions.append(action)
            self.kinds[action] = tool
            rows.append([float(step and not made), float(not step and not made), float(made), 0, 0, 0, 0, 0, 0])
        for tool, action, right in self._acts():
            actions.append(action)
            self.kinds[action] = tool
            rows.append([0, 0, 0, float(right), float(not right), 0, 0, 0, 0])
        looked = sum(1 for action in self.made if self.kinds.get(action) in _sop().READ_ONLY) / _LOOKUPS
        for _, action, settled, possible in self._answers():
            actions.append(action)
            self.kinds[action] = "answer"
            rows.append([0, 0, 0, 0, 0, float(settled), float(possible and not settled), float(not possible), looked])
        return actions, np.array(rows, dtype=np.float64)

    def observe(self, action: str, observation: str) -> None:
        tool = self.kinds.get(action)
        self.made.add(action)
        response = _sop().parse_response(observation)
        if tool is None or not isinstance(response, dict):
            return
        found = {} if response.get("error") == "not_found" else response
        if "error" in response and response.get("error") != "not_found":
            return  # a refused call tells nothing about the ticket
        if tool == "lookup_customer":
            self.facts.customer = found
        elif tool == "get_order_history":
            self.facts.history = found
        elif tool == "track_shipment":
            self.facts.shipment = found
        elif tool == "get_return_policy":
            self.facts.policy = found
        elif tool == "issue_refund":
            self.facts.refund_id = str(response.get("refund_id"))
        elif tool == "create_case":
            self.facts.case_id = str(response.get("case_id"))


class SopSupportAgent:
    env_id = "sop_support"
    feature_names = FEATURES

    def __init__(self) -> None:
        self.tickets = _env().tickets()
        self.max_turns = int(_env().env.MAX_TURNS)

    def start(self, task: Mapping[str, Any], observation: str, rng: np.random.Generator) -> SopSupportEpisode:
        info = task.get("info")
        ticket_id = info.get("ticket_id") if isinstance(info, Mapping) else None
        if ticket_id not in self.tickets:
            raise ValueError(f"unknown sop_support ticket {json.dumps(ticket_id)[:40]}")
        return SopSupportEpisode(self.tickets[ticket_id])
