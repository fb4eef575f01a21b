"""The ask_to_code agent: each turn, ask about one of the task's open points or submit code.

Actions: ``ask about requirement k`` (a question phrased with that requirement's topic words, so the
simulated user answers exactly that point) for every hidden requirement of the task, or ``submit``.
Writing the program is not what a CPU policy can learn, so a scripted coder stands in for it: it submits
the task's reference program once the user has revealed every requirement, and otherwise the program a
model writes from the prompt alone (the task's naive solution). The environment's sandboxed hidden tests
score either one, so correctness is earned only by asking first.

Features, in [0, 1]: ``submit``, ``submit_without_asking`` (a submission on turn 1: guessing),
``submit_informed`` (share of requirements revealed, on submit), ``submit_last_turn`` (the last turn
left: not submitting now forfeits the episode), ``ask_open`` (a question about a point not yet answered),
``ask_repeat`` (a question already answered: a wasted turn that can also trip the loop penalty) and
``ask_late`` (a question, scaled by how many turns are used).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import numpy as np

from mtrl.envs.registry import load_spec
from mtrl.local.policy import FloatArray

FEATURES: tuple[str, ...] = (
    "submit",
    "submit_without_asking",
    "submit_informed",
    "submit_last_turn",
    "ask_open",
    "ask_repeat",
    "ask_late",
)


@cache
def _task_bank() -> dict[str, Any]:
    """The environment's own task bank (one source: the same tasks, requirements and programs)."""
    module = load_spec("ask_to_code").module
    return {task.task_id: task for task in module.TASKS}


@cache
def _max_turns() -> int:
    turns: int = load_spec("ask_to_code").module.make_env().max_turns
    return turns


def question_about(requirement_keywords: Sequence[str], others: Sequence[Sequence[str]]) -> str:
    """A question naming this requirement's topic words that no other requirement of the task uses."""
    taken = {word for keywords in others for word in keywords}
    words = [word for word in requirement_keywords if word not in taken] or list(requirement_keywords)
    return f"Could you clarify what you expect about: {', '.join(words)}?"


class AskToCodeEpisode:
    def __init__(self, agent: AskToCodeAgent, task: Any) -> None:
        self.agent = agent
        self.task = task
        keywords = [requirement.keywords for requirement in task.requirements]
        self.questions = [
            question_about(own, [other for j, other in enumerate(keywords) if j != k]) for k, own in enumerate(keywords)
        ]
        self.revealed: set[int] = set()
        self.asked: list[int] = []
        self.turn = 0

    def options(self) -> tuple[Sequence[str], FloatArray]:
        n = len(self.task.requirements)
        turns = self.agent.max_turns
        rows: list[list[float]] = []
        actions: list[str] = []
        for k, question in enumerate(self.questions):
            open_point = k not in self.revealed
            rows.append([0.0, 0.0, 0.0, 0.0, float(open_point), float(not open_point), self.turn / turns])
            actions.append(question)
        last_turn = self.turn == turns - 1
        rows.append([1.0, float(not self.asked), len(self.revealed) / n, float(last_turn), 0.0, 0.0, 0.0])
        actions.append(self.code())
        return actions, np.array(rows, dtype=np.float64)

    def code(self) -> str:
        """The scripted coder's submission: the reference program only when every requirement is known."""
        informed = len(self.revealed) == len(self.task.requirements)
        program = self.task.solution if informed else self.task.naive
        return f"```python\n{program}```"

    def observe(self, action: str, observation: str) -> None:
        self.turn += 1
        if action in self.questions:
            k = self.questions.index(action)
            self.asked.append(k)
            if _mentions(observation, self.task.requirements[k].answer):
                self.revealed.add(k)


class AskToCodeAgent:
    env_id = "ask_to_code"
    feature_names = FEATURES

    def __init__(self) -> None:
        self.tasks = _task_bank()
        self.max_turns = _max_turns()

    def start(self, task: Mapping[str, Any], observation: str, rng: np.random.Generator) -> AskToCodeEpisode:
        info = task.get("info")
        task_id = info.get("task_id") if isinstance(info, Mapping) else None
        if task_id not in self.tasks:
            raise ValueError(f"unknown ask_to_code task {task_id!r}")
        return AskToCodeEpisode(self, self.tasks[task_id])


def _mentions(observation: str, answer: str) -> bool:
    normalise = re.compile(r"\s+")
    return normalise.sub(" ", answer.strip()) in normalise.sub(" ", observation)
