"""sop_support's recorded data: the tickets, and the read-only tools replayed from ``fixtures/``.

Fixtures (written for this environment; the store, its customers and orders are invented):

- ``customers.csv`` — ``lookup_customer(email)``: the account (``customer_id``, ``name``, ``tier``, ``status``);
- ``order_history.jsonl`` — ``get_order_history(customer_id)``: the customer's orders (id, item, category, price);
- ``shipments.csv`` — ``track_shipment(order_id)``: carrier, ``status`` (delivered / in_transit / lost) and
  ``delivered_on``;
- ``policies.csv`` — ``get_return_policy(category)``: return window, restocking fee, defect window;
- ``tickets.csv`` — the support tickets (the tasks): who writes, about which order, why, and on which day.

Every tool answers an input it has no record of with the real system's documented "not found" object.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from mtrl.envs.tools import ReplayTool, read_csv_rows, read_jsonl_records

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REASONS: dict[str, str] = {
    "changed_mind": "I changed my mind and would like to send it back.",
    "wrong_size": "It does not fit me.",
    "not_as_described": "It is not what the product page described.",
    "defective": "It is defective: it stopped working properly.",
    "not_received": "It never arrived.",
}


@dataclass(frozen=True)
class Ticket:
    """One support request: the task of one episode."""

    ticket_id: str
    email: str
    order_id: str
    reason: str
    today: str  # ISO date the ticket is handled on ("days since delivery" counts from it)

    def text(self) -> str:
        """The ticket as the agent reads it."""
        return (
            f"Ticket {self.ticket_id} (today is {self.today})\n"
            f"From: {self.email}\n"
            f"Order: {self.order_id}\n"
            f'Reason: {self.reason} — "{REASONS[self.reason]}"'
        )


def _not_found(what: str) -> str:
    return json.dumps({"error": "not_found", "message": f"no {what} matches this input"})


@cache
def tickets() -> dict[str, Ticket]:
    """Every ticket by id, in file order."""
    found: dict[str, Ticket] = {}
    for row in read_csv_rows(FIXTURES / "tickets.csv"):
        ticket = Ticket(**row)
        if ticket.reason not in REASONS:
            raise ValueError(f"tickets.csv: ticket {ticket.ticket_id} has unknown reason {ticket.reason!r}")
        found[ticket.ticket_id] = ticket
    return found


@cache
def orders() -> dict[str, dict[str, Any]]:
    """Every order by id, with its customer (the refund system's own order table)."""
    found: dict[str, dict[str, Any]] = {}
    for arguments, response in read_jsonl_records(FIXTURES / "order_history.jsonl", tool="get_order_history"):
        for order in response["orders"]:
            found[order["order_id"]] = {**order, "customer_id": arguments["customer_id"]}
    return found


@cache
def customer_ids_by_email() -> dict[str, str]:
    """The account id behind each e-mail address (casefolded)."""
    return {row["email"].casefold(): row["customer_id"] for row in read_csv_rows(FIXTURES / "customers.csv")}


def orders_in_scope(ticket: Ticket) -> list[dict[str, Any]]:
    """The orders a ticket's sandbox is seeded with: the writer's own orders and the order the ticket names."""
    customer_id = customer_ids_by_email().get(ticket.email.casefold())
    return [o for o in orders().values() if o["customer_id"] == customer_id or o["order_id"] == ticket.order_id]


@cache
def read_only_tools() -> tuple[ReplayTool, ...]:
    """The four record–replay tools, loaded once per process (they are immutable)."""
    return (
        ReplayTool.from_csv(
            FIXTURES / "customers.csv",
            name="lookup_customer",
            description="Find a customer account by e-mail address: id, name, tier and account status.",
            parameters={"email": "the e-mail address the customer wrote from"},
            not_found=_not_found("customer"),
        ),
        ReplayTool.from_jsonl(
            FIXTURES / "order_history.jsonl",
            name="get_order_history",
            description="List a customer's orders: order id, item, product category and price paid.",
            parameters={"customer_id": "the customer id from lookup_customer"},
            not_found=_not_found("customer"),
        ),
        ReplayTool.from_csv(
            FIXTURES / "shipments.csv",
            name="track_shipment",
            description="Shipment of an order: carrier, status (delivered, in_transit or lost) and delivery date.",
            parameters={"order_id": "the order id"},
            not_found=_not_found("shipment"),
        ),
        ReplayTool.from_csv(
            FIXTURES / "policies.csv",
            name="get_return_policy",
            description="Return policy of a product category: return window, restocking fee, defect window (days).",
            parameters={"category": "the product category from the order history"},
            not_found=_not_found("policy"),
        ),
    )


def ticket_id_of(metadata: Mapping[str, Any]) -> Any:
    info = metadata.get("info")
    return info.get("ticket_id") if isinstance(info, Mapping) else None
