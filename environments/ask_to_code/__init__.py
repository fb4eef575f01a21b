"""ask_to_code: ask clarifying questions about an underspecified coding task, then submit code.

Dataset rows: ``{"id": str, "metadata": {"prompt": str, "info": {"task_id": "<one of tasks.TASKS>"}}}``.
The core has no dependencies beyond ``mtrl.sandbox``; ``load_environment`` wraps it for ``verifiers``.
"""

from __future__ import annotations

from typing import Any

from environments.ask_to_code.env import MAX_TURNS, WEIGHTS, AskToCodeEnv, validate_task
from environments.ask_to_code.tasks import TASKS
from mtrl.envs.verifiers_adapter import to_verifiers_environment

ENV_ID = "ask_to_code"
DESCRIPTION = "Underspecified coding tasks: ask the user first, then submit code scored by hidden tests."
EVALUATION = "all hidden tests pass (1) or not (0); the asking and penalty terms are reward shaping only"
EXAMPLE_TASK: dict[str, Any] = {"prompt": TASKS[0].prompt, "info": {"task_id": TASKS[0].task_id}}
SYSTEM_PROMPT = (
    "You are a careful programmer helping a user. The request may leave out details that matter. Each turn, "
    "either ask the user one short clarifying question, or reply with your final Python code in a single "
    "```python block (that ends the conversation)."
)
EXAMPLE_ACTIONS = [
    "Which separator should join the words?",
    "Is there a maximum length?",
    f"```python\n{TASKS[0].solution}```",
]

__all__ = [
    "DESCRIPTION",
    "ENV_ID",
    "EVALUATION",
    "EXAMPLE_ACTIONS",
    "EXAMPLE_TASK",
    "MAX_TURNS",
    "SYSTEM_PROMPT",
    "TASKS",
    "WEIGHTS",
    "AskToCodeEnv",
    "load_environment",
    "make_env",
    "validate_task",
]


def make_env(**kwargs: Any) -> AskToCodeEnv:
    return AskToCodeEnv(**kwargs)


def load_environment(**kwargs: Any) -> Any:
    """verifiers entry point (Nova Forge reward workers); imports ``verifiers`` lazily."""
    kwargs.setdefault("system_prompt", SYSTEM_PROMPT)
    return to_verifiers_environment(
        make_env, validate_task=validate_task, component_names=list(WEIGHTS), max_turns=MAX_TURNS, **kwargs
    )
