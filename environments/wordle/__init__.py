"""Wordle: six guesses at a hidden 5-letter word with G/Y/X feedback and a tiered, shaped reward.

Dataset rows: ``{"id": str, "metadata": {"prompt": str, "answer": "<5-letter word from the answer list>"}}``.
The core (``game``, ``words``) has no dependencies; ``load_environment`` wraps it for ``verifiers``.
"""

from __future__ import annotations

from typing import Any

from environments.wordle.game import WordleEnv, score_guess, validate_answer
from environments.wordle.words import default_words
from mtrl.envs.verifiers_adapter import to_verifiers_environment

ENV_ID = "wordle"
DESCRIPTION = "Wordle: 6 guesses, G/Y/X feedback; solve fast > solve slow > loss > no play."
EVALUATION = "the secret word is guessed within the allowed turns (1) or not (0)"
EXAMPLE_TASK: dict[str, Any] = {"prompt": "Guess the 5-letter word", "answer": "beach"}
EXAMPLE_ACTIONS = ["raise", "beach"]
# Invalid guesses do not use one of the 6 guesses, so the turn limit leaves room for a few of them.
MAX_TURNS = 12
SYSTEM_PROMPT = (
    "You are playing Wordle: find the hidden 5-letter English word in at most 6 guesses. After each guess "
    "you get feedback per letter: G right place, Y in the word elsewhere, X not in the word. Use every clue "
    "and never repeat a guess. Reply with exactly one 5-letter word and nothing else."
)

__all__ = [
    "DESCRIPTION",
    "ENV_ID",
    "EVALUATION",
    "EXAMPLE_ACTIONS",
    "EXAMPLE_TASK",
    "MAX_TURNS",
    "SYSTEM_PROMPT",
    "WordleEnv",
    "load_environment",
    "make_env",
    "score_guess",
    "validate_task",
]


def validate_task(metadata: dict[str, Any]) -> list[str]:
    """Problems with one dataset row's metadata: a string/list prompt and an answer from the answer list."""
    problems = validate_answer(metadata.get("answer"), default_words())
    prompt = metadata.get("prompt")
    if not isinstance(prompt, str | list):
        problems.append(f"'prompt' must be a string or a list of messages (got {type(prompt).__name__})")
    return problems


def make_env(**kwargs: Any) -> WordleEnv:
    return WordleEnv(**kwargs)


def load_environment(**kwargs: Any) -> Any:
    """verifiers entry point (Nova Forge reward workers); imports ``verifiers`` lazily."""
    kwargs.setdefault("system_prompt", SYSTEM_PROMPT)
    return to_verifiers_environment(
        make_env, validate_task=validate_task, component_names=["outcome", "shaping"], max_turns=MAX_TURNS, **kwargs
    )
