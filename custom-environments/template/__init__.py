"""Template reward environment: copy this directory to ``custom-environments/<your_env_id>/``.

The task: the policy must reply with a secret word it can discover by asking for hints. It shows every
part of the contract in ``mtrl.contracts.environment`` with no dependencies: a multi-turn ``step``, an
aggregate reward with named components, metrics, a dataset row check and the verifiers entry point.
After copying, change ``ENV_ID`` to the new directory name. ``sample/train.jsonl`` and ``sample/eval.jsonl`` are a
small dataset so ``mtrl env try`` runs on the copy at once; ``eval.jsonl`` is the held-out set it reports success on.

The reward shows the usual split between what is trained and what is evaluated: ``success`` (the external
criterion: the exact word) is binary, while the reward adds a dense ``closeness`` term (partial credit for letters
of the word) so GRPO still sees differences between rollouts that all failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mtrl.contracts.environment import MALFORMED_ACTIONS, EpisodeResult, StepResult, TaskError
from mtrl.envs.verifiers_adapter import to_verifiers_environment

ENV_ID = "template"
DESCRIPTION = "Template: say the secret word; 'hint' reveals one more letter (copy me)."
EVALUATION = "the reply is exactly the secret word (1) or not (0); closeness and hint cost are reward only"
EXAMPLE_TASK: dict[str, Any] = {"prompt": "Say the secret word. Reply 'hint' for a letter.", "answer": "otter"}
EXAMPLE_ACTIONS = ["hint", "otter"]

# The most turns an episode takes: every driver (training, `mtrl env try`, the reward workers) stops here. Without it
# the default is mtrl.contracts.environment.DEFAULT_MAX_TURNS. SYSTEM_PROMPT, if set, is the system message every
# policy gets.
MAX_TURNS = 4
HINT_COST = 0.1
CLOSENESS_WEIGHT = 0.3


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
    """One episode. Reward: 1.0 for the right word, + 0.3 × closeness of the best reply, − 0.1 per hint."""

    def __init__(self, max_turns: int = MAX_TURNS) -> None:
        self.max_turns = max_turns
        self._answer = ""
        self._hints = 0
        self._turns = 0
        self._solved = False
        self._done = False
        self._closeness = 0.0
        self._malformed = 0

    @property
    def done(self) -> bool:
        return self._done

    def reset(self, task: Mapping[str, Any]) -> str:
        problems = validate_task(dict(task))
        if problems:
            raise TaskError("; ".join(problems))
        self._answer = str(task["answer"]).strip().lower()
        self._hints = self._turns = self._malformed = 0
        self._solved = self._done = False
        self._closeness = 0.0
        return f"{task['prompt']} The word has {len(self._answer)} letters."

    def step(self, action: str) -> StepResult:
        if self._done:
            return StepResult("The episode is over.", True)
        self._turns += 1
        reply = action.strip().lower() if isinstance(action, str) else ""
        if len(reply.split()) != 1:
            # Report actions your environment cannot use as EpisodeResult.metrics[MALFORMED_ACTIONS]: training health
            # watches the share of episodes with any (here: an empty reply or more than one word).
            self._malformed += 1
        if reply == "hint":
            self._hints += 1
            observation = f"Hint: the word starts with '{self._answer[: self._hints]}'."
        elif reply == self._answer:
            self._solved = self._done = True
            self._closeness = 1.0
            return StepResult("Correct!", True)
        else:
            self._closeness = max(self._closeness, closeness(reply, self._answer))
            observation = "Not the word."
        if self._turns >= self.max_turns:
            self._done = True
            observation += " Out of turns."
        return StepResult(observation, self._done)

    def result(self) -> EpisodeResult:
        correct = 1.0 if self._solved else 0.0
        hint_cost = -HINT_COST * self._hints
        near = CLOSENESS_WEIGHT * self._closeness
        return EpisodeResult(
            reward=correct + near + hint_cost,
            components={"correct": correct, "closeness": near, "hint_cost": hint_cost},
            metrics={
                "turns": float(self._turns),
                "hints": float(self._hints),
                MALFORMED_ACTIONS: float(self._malformed),
            },
            success=self._solved,
            evaluation=1.0 if self._solved else 0.0,
        )


def closeness(reply: str, answer: str) -> float:
    """Share of the answer's letters (with multiplicity) found in the reply's first word, in [0, 1]."""
    words = reply.split()
    guess = words[0] if words else ""
    remaining = list(guess)
    found = 0
    for letter in answer:
        if letter in remaining:
            remaining.remove(letter)
            found += 1
    return found / len(answer) if answer else 0.0


def make_env(**kwargs: Any) -> SecretWordEnv:
    return SecretWordEnv(**kwargs)


def load_environment(**kwargs: Any) -> Any:
    """verifiers entry point for the Nova Forge worker; ``verifiers`` is imported only here."""
    return to_verifiers_environment(make_env, validate_task=validate_task, max_turns=MAX_TURNS, **kwargs)
