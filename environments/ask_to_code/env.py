"""ask_to_code: an underspecified coding request; asking first is how to learn the hidden requirements.

Each turn the policy either asks a clarifying question (answered by the simulated user with the one
requirement it is about) or submits code (a fenced ```python block, or bare code); a submission ends the
episode and is scored on hidden test cases: the program runs in ``mtrl.sandbox`` and sees only their
inputs; the judge outside the sandbox compares its answers with the expected values (``run_cases``).

Reward = 1.0·correctness + 0.6·asked_before_coding + 0.4·guessed_immediately + 0.2·loop_penalty, with
- correctness: share of hidden tests passed (0 when nothing was submitted);
- asked_before_coding: 1.0 asked on turn 1 then submitted; 0.6 asked later then submitted; 0 otherwise
  (asking is rewarded on its own, but only together with a submission, so endless questions earn nothing);
- guessed_immediately: −1.0 when code is submitted on turn 1 without asking;
- loop_penalty: −0.5 when the last two turns are more than 80% similar.
Each component is reported separately (``components`` holds the raw, unweighted values).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

from environments.ask_to_code import user
from environments.ask_to_code.task_model import Task
from environments.ask_to_code.tasks import TASKS
from mtrl.contracts.environment import MALFORMED_ACTIONS, EpisodeResult, StepResult, TaskError
from mtrl.sandbox import Limits, SandboxResult, run_cases

WEIGHTS = {"correctness": 1.0, "asked_before_coding": 0.6, "guessed_immediately": 0.4, "loop_penalty": 0.2}
ASKED_FIRST = 1.0
ASKED_LATER = 0.6
GUESS_PENALTY = -1.0
LOOP_PENALTY = -0.5
LOOP_SIMILARITY = 0.8
MAX_TURNS = 6
DEFAULT_LIMITS = Limits(timeout_s=10.0, cpu_s=5, memory_mb=512, max_processes=16)

TASKS_BY_ID: dict[str, Task] = {task.task_id: task for task in TASKS}
_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
_CODE_LINE = re.compile(r"^(def |class |import |from \S+ import )", re.MULTILINE)

INSTRUCTIONS = (
    "Each turn, either ask me one clarifying question, or submit your final code in a ```python block. "
    "Submitting ends the conversation and your code is tested."
)


def extract_code(action: str) -> str | None:
    """The submitted program, or None when the action is not a submission."""
    fenced = _FENCE.findall(action)
    if fenced:
        return "\n".join(block.strip("\n") for block in fenced) + "\n"
    if _CODE_LINE.search(action):
        return action.strip("\n") + "\n"
    return None


def similarity(first: str, second: str) -> float:
    return difflib.SequenceMatcher(None, first, second).ratio()


def task_id_of(metadata: Mapping[str, Any]) -> Any:
    info = metadata.get("info")
    return info.get("task_id") if isinstance(info, Mapping) else None


def validate_task(metadata: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    task_id = task_id_of(metadata)
    if not isinstance(metadata.get("info"), Mapping):
        problems.append("'info' must be an object with 'task_id'")
    elif not isinstance(task_id, str):
        problems.append("'info.task_id' must be a string")
    elif task_id not in TASKS_BY_ID:
        problems.append(f"'info.task_id' {task_id!r} is not an ask_to_code task")
    if not isinstance(metadata.get("prompt"), str | list):
        problems.append("'prompt' must be a string or a list of messages")
    return problems


class AskToCodeEnv:
    """One episode of ask_to_code. ``limits`` bound the sandboxed test run of the submission."""

    def __init__(self, *, max_turns: int = MAX_TURNS, limits: Limits | None = None) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.max_turns = max_turns
        self.limits = limits or DEFAULT_LIMITS
        self.task: Task | None = None
        self._reset_state()

    def _reset_state(self) -> None:
        self.actions: list[str] = []
        self.kinds: list[str] = []  # "question", "submission" or "other", one per turn
        self.revealed: set[int] = set()
        self.submission: SandboxResult | None = None
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def reset(self, task: Mapping[str, Any]) -> str:
        problems = validate_task(dict(task))
        if problems:
            raise TaskError("; ".join(problems))
        self.task = TASKS_BY_ID[task_id_of(task)]
        self._reset_state()
        prompt = task.get("prompt")
        request = prompt if isinstance(prompt, str) and prompt.strip() else self.task.prompt
        return f"{request}\n\n{INSTRUCTIONS}"

    def step(self, action: str) -> StepResult:
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            return StepResult("The conversation is over.", True)
        action = action if isinstance(action, str) else ""  # not text: neither a question nor code
        self.actions.append(action)
        code = extract_code(action)
        if code is not None:
            self.kinds.append("submission")
            self.submission = run_cases(code, self.task.cases, self.limits)
            self._done = True
            result = self.submission
            return StepResult(
                f"Submitted. Hidden tests: {result.tests_passed}/{result.tests_total} passed ({result.status}).", True
            )
        if "?" in action:
            self.kinds.append("question")
            reply, revealed = user.answer(action, self.task)
            if revealed is not None:
                self.revealed.add(revealed)
            observation = reply
        else:
            self.kinds.append("other")
            observation = "Please either ask me a clarifying question or submit your code in a ```python block."
        if len(self.actions) >= self.max_turns:
            self._done = True
            observation += f"\nOut of turns ({self.max_turns}) without a submission."
        return StepResult(observation, self._done)

    def components(self) -> dict[str, float]:
        submitted = self.submission is not None
        correctness = self.submission.pass_fraction if self.submission is not None else 0.0
        asked = 0.0
        if submitted and "question" in self.kinds:
            asked = ASKED_FIRST if self.kinds[0] == "question" else ASKED_LATER
        guessed = GUESS_PENALTY if self.kinds[:1] == ["submission"] else 0.0
        looping = len(self.actions) >= 2 and similarity(self.actions[-1], self.actions[-2]) > LOOP_SIMILARITY
        return {
            "correctness": correctness,
            "asked_before_coding": asked,
            "guessed_immediately": guessed,
            "loop_penalty": LOOP_PENALTY if looping else 0.0,
        }

    def result(self) -> EpisodeResult:
        components = self.components()
        reward = sum(WEIGHTS[name] * value for name, value in components.items())
        tests_total = self.submission.tests_total if self.submission else 0
        return EpisodeResult(
            reward=reward,
            components=components,
            metrics={
                "turns": float(len(self.actions)),
                "questions": float(self.kinds.count("question")),
                "requirements_revealed": float(len(self.revealed)),
                "tests_passed": float(self.submission.tests_passed if self.submission else 0),
                "tests_total": float(tests_total),
                "submitted": 1.0 if self.submission is not None else 0.0,
                # Turns that were neither a question nor code: the user cannot act on them.
                MALFORMED_ACTIONS: float(self.kinds.count("other")),
            },
            success=self.submission is not None and self.submission.status == "passed",
            # External evaluation: every hidden test passed (the reward's shaping terms play no part).
            evaluation=1.0 if self.submission is not None and self.submission.status == "passed" else 0.0,
        )
