"""What an ask_to_code task is (tasks.py holds the bank): the requirements the user reveals when asked, and the
hidden test cases, built as data (see tasks.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mtrl.sandbox import Case, Check, Raises


@dataclass(frozen=True)
class Requirement:
    keywords: tuple[str, ...]  # lowercase word stems that show a question is about this requirement
    answer: str


@dataclass(frozen=True)
class Task:
    task_id: str
    prompt: str
    requirements: tuple[Requirement, ...]
    cases: tuple[Case, ...]
    solution: str
    naive: str


def requirement(keywords: str, answer: str) -> Requirement:
    return Requirement(tuple(keywords.split()), answer)


def check(call: str, args: tuple[Any, ...], expected: Any) -> Check:
    """``call(*args)`` must return ``expected`` (exact types, recursively)."""
    return Check(call, args, expected)


def raises(call: str, args: tuple[Any, ...]) -> Check:
    """``call(*args)`` must raise ValueError (or a subclass)."""
    return Check(call, args, Raises("ValueError"))


def case(name: str, *checks: Check) -> Case:
    return Case(name, checks)
