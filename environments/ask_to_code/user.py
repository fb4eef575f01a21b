"""The simulated user: answers a clarifying question with the one hidden requirement it is about."""

from __future__ import annotations

import re

from environments.ask_to_code.task_model import Requirement, Task

UNCLEAR_REPLY = (
    "I'm not sure which detail you mean. Ask me about one specific aspect "
    "(for example the output format, edge cases, or what should happen with bad input)."
)
_WORD = re.compile(r"[a-z0-9]+")


def _matches(word: str, keyword: str) -> bool:
    # Keywords are stems: "truncat" matches "truncate"/"truncated"; short ones must match exactly.
    return word == keyword or (len(keyword) >= 4 and word.startswith(keyword))


def best_requirement(question: str, task: Task) -> Requirement | None:
    """The requirement sharing the most keywords with the question (first one on a tie), or None."""
    words = set(_WORD.findall(question.lower()))
    best: Requirement | None = None
    best_score = 0
    for requirement in task.requirements:
        score = sum(1 for keyword in requirement.keywords if any(_matches(word, keyword) for word in words))
        if score > best_score:
            best, best_score = requirement, score
    return best


def answer(question: str, task: Task) -> tuple[str, int | None]:
    """(reply, index of the requirement revealed or None). Never reveals more than one requirement."""
    requirement = best_requirement(question, task)
    if requirement is None:
        return UNCLEAR_REPLY, None
    return requirement.answer, task.requirements.index(requirement)
