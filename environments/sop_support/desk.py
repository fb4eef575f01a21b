"""The support desk of one episode: the replayed read-only tools and the two tools that write to its sandbox.

``issue_refund`` and ``create_case`` write to the episode's own in-memory SQLite database
(``mtrl.envs.episode_state``), seeded from the ticket with the orders in its scope (the writer's own and the one
it names), so the refund system can check an order and its price. Both refuse what the real system refuses
(unknown order, an amount above the price paid, a second refund or case for one order, a case for someone else's
order) with an ``{"error": ...}`` observation. Record ids are fixed per (ticket, order), so replays agree, but
cannot be guessed from the ticket: an answer can only cite one the tool returned.
"""

from __future__ import annotations

import hashlib
from decimal import Decimal, InvalidOperation
from typing import Any

from environments.sop_support import data
from environments.sop_support.data import Ticket
from mtrl.envs.episode_state import EpisodeState
from mtrl.envs.tools import FunctionTool, ToolBox, ToolError, ToolOutcome

REFUND_REASONS = ("DEFECTIVE", "WITHIN_WINDOW", "LOST_IN_TRANSIT")
CASE_REASONS = ("ACCOUNT_HOLD", "HIGH_VALUE")
READ_ONLY = ("lookup_customer", "get_order_history", "track_shipment", "get_return_policy")
MUTATING = ("issue_refund", "create_case")
SCHEMA = """
CREATE TABLE orders (order_id TEXT PRIMARY KEY, customer_id TEXT NOT NULL, price_cents INTEGER NOT NULL);
CREATE TABLE refunds (refund_id TEXT PRIMARY KEY, order_id TEXT NOT NULL UNIQUE, amount_cents INTEGER NOT NULL,
                      reason_code TEXT NOT NULL);
CREATE TABLE cases (case_id TEXT PRIMARY KEY, customer_id TEXT NOT NULL, order_id TEXT NOT NULL UNIQUE,
                    reason_code TEXT NOT NULL);
"""
Records = tuple[tuple[str, ...], ...]
MAX_AMOUNT = Decimal(1_000_000)
MAX_AMOUNT_CHARS = 32


def record_id(prefix: str, ticket_id: str, order_id: str) -> str:
    """A sandbox record's id: fixed for (ticket, order), not guessable from the ticket."""
    return f"{prefix}-{hashlib.sha256(f'{ticket_id}|{prefix}|{order_id}'.encode()).hexdigest()[:8].upper()}"


def amount_cents(value: Any) -> int:
    """A positive amount with at most two decimals, in cents; ``ToolError`` for anything else (never raises more)."""
    text = str(value).strip() if isinstance(value, int | float | str) and not isinstance(value, bool) else ""
    if not text or len(text) > MAX_AMOUNT_CHARS:
        raise ToolError("amount must be a number")
    try:
        amount = Decimal(text)
        if not amount.is_finite() or amount <= 0:
            raise ToolError("amount must be a positive number")
        if amount > MAX_AMOUNT:
            raise ToolError(f"amount above {MAX_AMOUNT}")
        if amount != amount.quantize(Decimal("0.01")):
            raise ToolError("amount has more than two decimals")
    except InvalidOperation:
        raise ToolError("amount must be a number") from None
    return int(amount * 100)


def _code(value: Any, allowed: tuple[str, ...], tool: str) -> str:
    code = value.strip().upper() if isinstance(value, str) else ""
    if code not in allowed:
        raise ToolError(f"{tool} takes reason_code one of {', '.join(allowed)}")
    return code


class Desk:
    """Tools and sandbox for one ticket; ``close()`` frees the sandbox and keeps its final records."""

    def __init__(self, ticket: Ticket) -> None:
        self.ticket = ticket
        seed = [
            {"order_id": o["order_id"], "customer_id": o["customer_id"], "price_cents": amount_cents(o["price"])}
            for o in data.orders_in_scope(ticket)
        ]
        self.state = EpisodeState(schema=SCHEMA, seed={"orders": seed})
        self._final: Records = ()
        self.toolbox = ToolBox(
            [
                *data.read_only_tools(),
                FunctionTool(
                    name="issue_refund",
                    description="Refund an order (once per order). Returns the refund_id.",
                    parameters={
                        "order_id": "the order id",
                        "amount": "the amount to refund, at most the price paid",
                        "reason_code": f"one of {', '.join(REFUND_REASONS)}",
                    },
                    function=self._issue_refund,
                ),
                FunctionTool(
                    name="create_case",
                    description="Open a case for a supervisor (once per order). Returns the case_id.",
                    parameters={
                        "customer_id": "the customer id",
                        "order_id": "the order id",
                        "reason_code": f"one of {', '.join(CASE_REASONS)}",
                    },
                    function=self._create_case,
                ),
            ]
        )

    def handle(self, action: str) -> ToolOutcome | None:
        """The action's tool call, run (``None`` when the action calls no tool)."""
        return self.toolbox.handle(action)

    def _order(self, order_id: Any) -> tuple[str, str, int]:
        found = self.state.db.execute(
            "SELECT order_id, customer_id, price_cents FROM orders WHERE order_id = ?", (str(order_id).strip(),)
        ).fetchone()
        if found is None:
            raise ToolError(f"no order {str(order_id)[:40]!r}")
        return str(found[0]), str(found[1]), int(found[2])

    def _issue_refund(self, arguments: dict[str, Any]) -> dict[str, Any]:
        order_id, _, price = self._order(arguments["order_id"])
        amount = amount_cents(arguments["amount"])
        reason = _code(arguments["reason_code"], REFUND_REASONS, "issue_refund")
        if amount > price:
            raise ToolError(f"amount exceeds the {price / 100:.2f} paid for {order_id}")
        if self.state.db.execute("SELECT 1 FROM refunds WHERE order_id = ?", (order_id,)).fetchone():
            raise ToolError(f"order {order_id} was already refunded")
        refund_id = record_id("RF", self.ticket.ticket_id, order_id)
        row = {"refund_id": refund_id, "order_id": order_id, "amount_cents": amount, "reason_code": reason}
        self.state.insert("refunds", [row])
        return {"refund_id": refund_id, "order_id": order_id, "amount": amount / 100, "reason_code": reason}

    def _create_case(self, arguments: dict[str, Any]) -> dict[str, Any]:
        order_id, owner, _ = self._order(arguments["order_id"])
        customer_id = str(arguments["customer_id"]).strip()
        reason = _code(arguments["reason_code"], CASE_REASONS, "create_case")
        if customer_id.casefold() != owner.casefold():
            raise ToolError(f"order {order_id} does not belong to customer {customer_id[:40]!r}")
        if self.state.db.execute("SELECT 1 FROM cases WHERE order_id = ?", (order_id,)).fetchone():
            raise ToolError(f"order {order_id} already has a case")
        case_id = record_id("CS", self.ticket.ticket_id, order_id)
        row = {"case_id": case_id, "customer_id": owner, "order_id": order_id, "reason_code": reason}
        self.state.insert("cases", [row])
        return {"case_id": case_id, "order_id": order_id, "reason_code": reason, "status": "open"}

    def records(self) -> Records:
        """The sandbox's refunds and cases without their ids, sorted (what the final state is judged on)."""
        if self.state.closed:
            return self._final
        refunds = [
            ("refund", str(row["order_id"]), f"{row['amount_cents'] / 100:.2f}", str(row["reason_code"]))
            for row in self.state.rows("refunds")
        ]
        cases = [
            ("case", str(row["customer_id"]), str(row["order_id"]), str(row["reason_code"]))
            for row in self.state.rows("cases")
        ]
        return tuple(sorted(refunds + cases))

    def close(self) -> None:
        """Free the sandbox (idempotent); ``records()`` keeps answering with the final records."""
        if not self.state.closed:
            self._final = self.records()
            self.state.close()
