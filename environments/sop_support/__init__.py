"""sop_support: a refund/return ticket handled by a standard operating procedure, with tools, then a JSON answer.

Dataset rows: ``{"id": str, "metadata": {"prompt": str, "info": {"ticket_id": "<a ticket of fixtures/tickets.csv>"}}}``.
Built from mtrl's environment blocks: record–replay read-only tools (``mtrl.envs.tools``), a seeded per-episode
SQLite sandbox (``mtrl.envs.episode_state``), and an exact-match evaluation next to a partial-credit reward
(``mtrl.envs.scoring``). ``load_environment`` wraps the core for ``verifiers``.
"""

from __future__ import annotations

from typing import Any

from environments.sop_support.data import Ticket, tickets
from environments.sop_support.env import MAX_TURNS, WEIGHTS, SopSupportEnv, validate_task
from environments.sop_support.sop import SOP, solve
from mtrl.envs.verifiers_adapter import to_verifiers_environment

ENV_ID = "sop_support"
DESCRIPTION = "Refund tickets by a standard operating procedure: lookups, a refund or case, a JSON answer."
EVALUATION = (
    "exact match of the final JSON answer (decision, refund_amount, reason_code, reference all equal) with the "
    "sandbox's final refunds and cases agreeing (1), else 0; procedure and excess-call terms are reward shaping only"
)
EXAMPLE_TASK: dict[str, Any] = {"prompt": tickets()["T001"].text(), "info": {"ticket_id": "T001"}}
EXAMPLE_ACTIONS: list[str] = list(solve("T001").actions)
SYSTEM_PROMPT = (
    "You are a customer-service agent for an outdoor-gear store. Follow the standard operating procedure in the "
    'ticket exactly, one tool call per turn as <tool_call>{"name": ..., "arguments": {...}}</tool_call>, and '
    "finish with the JSON answer inside <final_output></final_output>."
)

__all__ = [
    "DESCRIPTION",
    "ENV_ID",
    "EVALUATION",
    "EXAMPLE_ACTIONS",
    "EXAMPLE_TASK",
    "MAX_TURNS",
    "SOP",
    "SYSTEM_PROMPT",
    "WEIGHTS",
    "SopSupportEnv",
    "Ticket",
    "load_environment",
    "make_env",
    "solve",
    "tickets",
    "validate_task",
]


def make_env(**kwargs: Any) -> SopSupportEnv:
    return SopSupportEnv(**kwargs)


def load_environment(**kwargs: Any) -> Any:
    """verifiers entry point (Nova Forge reward workers); imports ``verifiers`` lazily."""
    kwargs.setdefault("system_prompt", SYSTEM_PROMPT)
    return to_verifiers_environment(
        make_env, validate_task=validate_task, component_names=list(WEIGHTS), max_turns=MAX_TURNS, **kwargs
    )
