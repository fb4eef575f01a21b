"""sop_support: handle a refund ticket by the standard operating procedure, with tools, then answer in JSON.

Each turn the policy either calls one tool (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``) or
answers (a JSON object inside ``<final_output>…</final_output>``, which ends the episode; an action holding
``<final_output>`` is the answer even when it also holds a tool call, which is then not run). Read-only tools
replay fixtures (``data``); ``issue_refund`` and ``create_case`` write to the episode's own in-memory SQLite
sandbox (``mtrl.envs.episode_state``), seeded with the store's orders and closed in ``close()``.

**Evaluation** (what the task owner accepts; ``EpisodeResult.evaluation``): 1 when every field of the answer
equals the reference solver's (``sop.solve``) and the sandbox's final records are the expected ones (the
refund or case the answer names exists, nothing else was created), else 0.

**Reward** = 0.6·fields + 0.2·state + 0.2·procedure + 0.1·excess_calls, with
- fields: share of the four answer fields right (0 without a valid answer);
- state: 1 when the sandbox's final records are the expected ones (only with a valid answer);
- procedure: share of the lookups the SOP needs for this ticket made before answering (only with a valid
  answer); a lookup counts once, so repeating it earns nothing;
- excess_calls: −(tool calls beyond the SOP's, capped at 4) / 4 — never a bonus, so calling more never pays,
  and required calls are free, so answering early does not save anything either.
So the reference episode scores 1.0 and anything else less: an early answer lacks a lookup (procedure < 1) or
a record (state and reference wrong); an answer outside ``<final_output>`` is no answer (reward ≤ 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from environments.sop_support import data, sop
from environments.sop_support.desk import READ_ONLY, Desk, Records
from mtrl.contracts.environment import MALFORMED_ACTIONS, EpisodeResult, StepResult, TaskError
from mtrl.envs.normalise import canonical_key
from mtrl.envs.scoring import extract_final_output, field_fraction

WEIGHTS = {"fields": 0.6, "state": 0.2, "procedure": 0.2, "excess_calls": 0.1}
EXCESS_CAP = 4
MAX_TURNS = 12
ANSWER_OPEN = "<final_output>"
INSTRUCTIONS = (
    "Work the ticket by the procedure. Each turn, call exactly one tool, or give your final answer inside "
    "<final_output></final_output> (that ends the ticket)."
)
NEITHER = (
    "No tool call and no final answer. Call one tool as <tool_call>{...}</tool_call>, or answer with the JSON "
    "object inside <final_output></final_output>."
)


def validate_task(metadata: dict[str, Any]) -> list[str]:
    """Problems with one dataset row's metadata: a prompt and ``info.ticket_id`` naming a known ticket."""
    problems: list[str] = []
    ticket_id = data.ticket_id_of(metadata)
    if not isinstance(metadata.get("info"), Mapping):
        problems.append("'info' must be an object with 'ticket_id'")
    elif not isinstance(ticket_id, str):
        problems.append("'info.ticket_id' must be a string")
    elif ticket_id not in data.tickets():
        problems.append(f"'info.ticket_id' {ticket_id[:40]!r} is not a sop_support ticket")
    if not isinstance(metadata.get("prompt"), str | list):
        problems.append("'prompt' must be a string or a list of messages")
    return problems


class SopSupportEnv:
    """One ticket. Call ``close()`` when done (the drivers do, in ``finally``): it frees the sandbox."""

    def __init__(self, *, max_turns: int = MAX_TURNS) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.max_turns = max_turns
        self.ticket: data.Ticket | None = None
        self.desk: Desk | None = None
        self._reset_state()

    def _reset_state(self) -> None:
        self.turns = 0
        self.calls: list[tuple[str, str]] = []  # (tool, canonical arguments) of each tool-calling action
        self.read_calls: list[tuple[str, str]] = []  # answered read-only calls, in order
        self.answer: dict[str, Any] | None = None
        self.answered = False  # the policy gave its final answer (valid or not)
        # Actions nothing could be made of: neither a tool call nor an answer, a tool call that does not parse,
        # or a final answer that is not one JSON object (a well-formed call the desk refuses is not malformed).
        self.malformed = 0
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def reset(self, task: Mapping[str, Any]) -> str:
        problems = validate_task(dict(task))
        if problems:
            raise TaskError("; ".join(problems))
        self.close()
        self.ticket = data.tickets()[data.ticket_id_of(task)]
        self._reset_state()
        self.desk = Desk(self.ticket)
        return f"{sop.SOP}\n\n{self.desk.toolbox.describe()}\n\n{self.ticket.text()}\n\n{INSTRUCTIONS}"

    def step(self, action: str) -> StepResult:
        if self.ticket is None or self.desk is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            return StepResult("The ticket is closed.", True)
        self.turns += 1
        text = action if isinstance(action, str) else ""
        if ANSWER_OPEN in text:
            self.answered = True
            self.answer = extract_final_output(text)
            if self.answer is None:
                self.malformed += 1
            self._done = True
            return StepResult("Answer recorded. The ticket is closed.", True)
        outcome = self.desk.handle(text)
        if outcome is None or outcome.call is None:
            self.malformed += 1
        if outcome is None:
            observation = NEITHER
        else:
            observation = outcome.observation
            call = outcome.call
            key = (call.name, canonical_key(call.arguments)) if call is not None else ("", "")
            self.calls.append(key)
            if call is not None and not outcome.error and call.name in READ_ONLY:
                self.read_calls.append(key)
        if self.turns >= self.max_turns:
            self._done = True
            observation += f"\nOut of turns ({self.max_turns}) without a final answer."
        return StepResult(observation, self._done)

    def records(self) -> Records:
        """The sandbox's refunds and cases (``Desk.records``); empty before ``reset``."""
        return self.desk.records() if self.desk is not None else ()

    def components(self, solution: sop.Solution) -> dict[str, float]:
        answered = self.answer is not None
        required_calls = solution.required_calls
        seen: set[tuple[str, str]] = set()
        excess = 0
        for call in self.calls:
            if call in required_calls and call not in seen:
                seen.add(call)
            else:
                excess += 1
        reads = set(self.read_calls)
        needed = set(solution.required_reads)
        return {
            "fields": field_fraction(solution.answer, self.answer) if answered else 0.0,
            "state": 1.0 if answered and self.records() == solution.records else 0.0,
            "procedure": len(needed & reads) / len(needed) if answered and needed else 0.0,
            "excess_calls": -min(excess, EXCESS_CAP) / EXCESS_CAP,
        }

    def result(self) -> EpisodeResult:
        """The episode's score, valid at any time; before ``reset`` (a task that never started) it is no answer."""
        if self.ticket is None or self.desk is None:
            components = dict.fromkeys(WEIGHTS, 0.0)
            names = ("turns", "tool_calls", "refused_calls", "answered", "records", MALFORMED_ACTIONS)
            metrics = dict.fromkeys(names, 0.0)
            return EpisodeResult(reward=0.0, components=components, metrics=metrics, evaluation=0.0)
        solution = sop.solve(self.ticket.ticket_id)
        components = self.components(solution)
        reward = sum(WEIGHTS[name] * value for name, value in components.items())
        exact = components["fields"] == 1.0 and components["state"] == 1.0
        return EpisodeResult(
            reward=reward,
            components=components,
            metrics={
                "turns": float(self.turns),
                "tool_calls": float(len(self.calls)),
                "refused_calls": float(self.desk.toolbox.refused),
                "answered": 1.0 if self.answer is not None else 0.0,
                "records": float(len(self.records())),
                MALFORMED_ACTIONS: float(self.malformed),
            },
            success=exact,
            evaluation=1.0 if exact else 0.0,
        )

    def close(self) -> None:
        """Free the episode's sandbox (idempotent); ``result()`` still scores the final state afterwards."""
        if self.desk is not None:
            self.desk.close()
