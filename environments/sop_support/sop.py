"""The standard operating procedure the agent follows, and the reference solver that follows it.

The reference solver plays the procedure against a fresh ``desk.Desk`` (the same replayed tools and sandbox a
policy gets), so each ticket's expected answer, expected final records and required lookups come from one
source: the fixtures, read the way the SOP says. It is also ``EXAMPLE_ACTIONS`` and the tests' oracle.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date
from decimal import ROUND_HALF_UP, Decimal
from functools import cache
from typing import Any

from environments.sop_support import data
from environments.sop_support.desk import CASE_REASONS, READ_ONLY, REFUND_REASONS, Desk, Records
from mtrl.envs.normalise import canonical_key
from mtrl.envs.tools import RESPONSE_CLOSE, RESPONSE_OPEN, format_tool_call

HIGH_VALUE_LIMIT = Decimal("400.00")
DENY_REASONS = ("UNVERIFIED", "ORDER_NOT_FOUND", "IN_TRANSIT", "OUTSIDE_WINDOW")
REASON_CODES = REFUND_REASONS + CASE_REASONS + DENY_REASONS  # one per branch of the procedure
DECISIONS = ("refund", "deny", "escalate")
ANSWER_FIELDS = ("decision", "refund_amount", "reason_code", "reference")

SOP = f"""\
Standard operating procedure: refund and return requests (follow the steps in order).
1. Verify the customer: lookup_customer with the ticket's e-mail.
   - Not found: deny, reason UNVERIFIED. Stop.
   - Account status "suspended": create_case(customer_id, order_id, "ACCOUNT_HOLD"); escalate, reason ACCOUNT_HOLD.
     Stop.
2. Check the order history: get_order_history with the customer id.
   - The ticket's order is not in it: deny, reason ORDER_NOT_FOUND. Stop.
3. Check the shipment: track_shipment with the order id.
   - "in_transit": deny, reason IN_TRANSIT. Stop.
   - "lost": the refund is the full price, reason LOST_IN_TRANSIT; go to step 5.
   - "delivered": days since delivery = today's date minus delivered_on.
4. Look up the policy: get_return_policy with the order's category.
   - Reason "defective" and days since delivery <= defect_window_days: the full price, reason DEFECTIVE.
   - Otherwise, days since delivery <= return_window_days: the price minus restocking_fee_pct percent (rounded
     to the cent), reason WITHIN_WINDOW.
   - Otherwise: deny, reason OUTSIDE_WINDOW. Stop.
5. Settle: a refund above {HIGH_VALUE_LIMIT} needs approval: create_case(customer_id, order_id, "HIGH_VALUE");
   escalate, reason HIGH_VALUE, refund_amount 0. Otherwise issue_refund(order_id, amount, reason_code); decision
   refund with that amount.
Answer once, at the end, with one JSON object inside <final_output></final_output>:
{{"decision": "refund" | "deny" | "escalate", "refund_amount": <amount refunded, 0 if none>,
 "reason_code": "<the reason code above>", "reference": "<refund_id or case_id you were given, null if none>"}}"""


@dataclass(frozen=True)
class Solution:
    """What following the SOP on one ticket does and answers."""

    ticket_id: str
    branch: str  # the reason code: which branch of the procedure the ticket takes
    actions: tuple[str, ...]  # the reference episode (tool calls, then the final answer)
    answer: dict[str, Any]
    records: Records  # the sandbox's expected final records (``Desk.records``)
    required_reads: tuple[tuple[str, str], ...]  # (tool, canonical arguments) of each lookup the SOP needs
    required_calls: frozenset[tuple[str, str]]  # the same for every tool call of the reference episode


def cents(value: Decimal) -> Decimal:
    return value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def days_between(start: str, end: str) -> int:
    return (date.fromisoformat(end) - date.fromisoformat(start)).days


def parse_response(observation: str) -> Any:
    """The JSON object a tool answered with (``None`` when the observation is not a tool response)."""
    text = observation.strip()
    if not (text.startswith(RESPONSE_OPEN) and RESPONSE_CLOSE in text):
        return None
    body = text[len(RESPONSE_OPEN) : text.index(RESPONSE_CLOSE)].strip()
    try:
        return json.loads(body)
    except ValueError:
        return None


def final_answer(answer: dict[str, Any]) -> str:
    return f"<final_output>{json.dumps(answer)}</final_output>"


def settle_amount(price: Any, fee_pct: Any = 0) -> Decimal:
    return cents(Decimal(str(price)) * (Decimal(100) - Decimal(str(fee_pct))) / Decimal(100))


@cache
def solve(ticket_id: str) -> Solution:  # noqa: PLR0911 - one return per branch of the procedure
    """Play the SOP on ``ticket_id`` against a fresh desk (the environment's real tools and sandbox)."""
    ticket = data.tickets()[ticket_id]
    desk = Desk(ticket)
    try:
        actions: list[str] = []
        reads: list[tuple[str, str]] = []
        calls: set[tuple[str, str]] = set()

        def call(name: str, **arguments: Any) -> Any:
            actions.append(format_tool_call(name, arguments))
            outcome = desk.handle(actions[-1])
            if outcome is None or outcome.error:
                raise RuntimeError(f"the reference solver's call {actions[-1]} was refused")
            calls.add((name, canonical_key(arguments)))
            if name in READ_ONLY:
                reads.append((name, canonical_key(arguments)))
            return parse_response(outcome.observation)

        def finish(branch: str, decision: str, amount: Decimal | int = 0, reference: str | None = None) -> Solution:
            answer = {
                "decision": decision,
                "refund_amount": float(amount),
                "reason_code": branch,
                "reference": reference,
            }
            actions.append(final_answer(answer))
            return Solution(ticket_id, branch, tuple(actions), answer, desk.records(), tuple(reads), frozenset(calls))

        customer = call("lookup_customer", email=ticket.email)
        if "customer_id" not in customer:
            return finish("UNVERIFIED", "deny")
        customer_id = customer["customer_id"]
        if customer["status"] == "suspended":
            case = call("create_case", customer_id=customer_id, order_id=ticket.order_id, reason_code="ACCOUNT_HOLD")
            return finish("ACCOUNT_HOLD", "escalate", reference=case["case_id"])
        history = call("get_order_history", customer_id=customer_id)
        order = next((o for o in history.get("orders", []) if o["order_id"] == ticket.order_id), None)
        if order is None:
            return finish("ORDER_NOT_FOUND", "deny")
        shipment = call("track_shipment", order_id=ticket.order_id)
        if shipment["status"] == "in_transit":
            return finish("IN_TRANSIT", "deny")
        if shipment["status"] == "lost":
            amount, branch = settle_amount(order["price"]), "LOST_IN_TRANSIT"
        else:
            days = days_between(shipment["delivered_on"], ticket.today)
            policy = call("get_return_policy", category=order["category"])
            if ticket.reason == "defective" and days <= int(policy["defect_window_days"]):
                amount, branch = settle_amount(order["price"]), "DEFECTIVE"
            elif days <= int(policy["return_window_days"]):
                amount, branch = settle_amount(order["price"], policy["restocking_fee_pct"]), "WITHIN_WINDOW"
            else:
                return finish("OUTSIDE_WINDOW", "deny")
        if amount > HIGH_VALUE_LIMIT:
            case = call("create_case", customer_id=customer_id, order_id=ticket.order_id, reason_code="HIGH_VALUE")
            return finish("HIGH_VALUE", "escalate", reference=case["case_id"])
        refund = call("issue_refund", order_id=ticket.order_id, amount=float(amount), reason_code=branch)
        return finish(branch, "refund", amount, refund["refund_id"])
    finally:
        desk.close()
