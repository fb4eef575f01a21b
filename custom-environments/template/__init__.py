"""Template reward environment: copy this directory to ``custom-environments/<your_env_id>/``.

The task: the policy must reply with a secret word it can discover by asking for hints. It shows every
part of the contract in ``mtrl.envs.contract`` with no dependencies: a multi-turn ``step``, an
aggregate reward with named components, metrics, a dataset row check and the verifiers entry point.
After copying, change ``ENV_ID`` to the new directory name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mtrl.envs.contract import EpisodeResult, StepResult, TaskError
from mtrl.envs.verifiers_adapter import to_verifiers_environment

ENV_ID = "template"
DESCRIPTION = "Template: say the secret word; 'hint' reveals one more letter (copy me)."
EXAMPLE_TASK: dict[str, Any] = {"prompt": "Say the secret word. Reply 'hint' for a letter.", "answer": "otter"}
EXAMPLE_ACTIONS = ["hint", "otter"]

MAX_TURNS = 4
HINT_COST = 0.1


def validate_task(metadata: dict[str, Any]) -> list[str]:
    """Problems with one dataset row's ``metadata`` (the pipeline rejects the dataset if any)."""
    problems: list[str] = []
    answer = metadata.get("answer")
    if not isinstance(answer, str) or not answer.strip():
        problems.append("'answer' must be a non-empty string")
    if not isinstance(metadata.get("prompt"), str | list):
        problems.append("'prompt' must be a string or a list of messages")
    return problems


class SecretWordEnv:
    """One episode. Rewards: 1.0 for the right word, minus 0.1 per hint; 0 if never answered right."""

    def __init__(self, max_turns: int = MAX_TURNS) -> None:
        self.max_turns = max_turns
        self._answer = ""
        self._hints = 0
        self._turns = 0
        self._solved = False
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def reset(self, task: Mapping[str, Any]) -> str:
        problems = validate_task(dict(task))
        if problems:
            raise TaskError("; ".join(problems))
        self._answer = str(task["answer"]).strip().lower()
        self._hints = self._turns = 0
        self._solved = self._done = False
        return f"{task['prompt']} The word has {len(self._answer)} letters."

    def step(self, action: str) -> StepResult:
        if self._done:
            return StepResult("The episode is over.", True)
        self._turns += 1
        reply = action.strip().lower()
        if reply == "hint":
            self._hints += 1
            observation = f"Hint: the word starts with '{self._answer[: self._hints]}'."
        elif reply == self._answer:
            self._solved = self._done = True
            return StepResult("Correct!", True)
        else:
            observation = "Not the word."
        if self._turns >= self.max_turns:
            self._done = True
            observation += " Out of turns."
        return StepResult(observation, self._done)

    def result(self) -> EpisodeResult:
        correct = 1.0 if self._solved else 0.0
        hint_cost = -HINT_COST * self._hints
        return EpisodeResult(
            reward=correct + hint_cost,
            components={"correct": correct, "hint_cost": hint_cost},
            metrics={"turns": float(self._turns), "hints": float(self._hints)},
            success=self._solved,
        )


def make_env(**kwargs: Any) -> SecretWordEnv:
    return SecretWordEnv(**kwargs)


def load_environment(**kwargs: Any) -> Any:
    """verifiers entry point for the Nova Forge worker; ``verifiers`` is imported only here."""
    return to_verifiers_environment(make_env, validate_task=validate_task, **kwargs)
