"""Agents turn an environment's observations into candidate actions with feature vectors.

The trainer is environment-neutral: it asks the agent for ``options()`` (action strings plus one feature
row each), lets the log-linear policy pick one, sends it to the environment and hands the observation
back with ``observe()``. One agent module per built-in environment; ``agent_for`` picks it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from mtrl.local.policy import FloatArray


class EpisodeAgent(Protocol):
    """The policy's view of one episode in progress."""

    def options(self) -> tuple[Sequence[str], FloatArray]:
        """Candidate actions and their ``(n, d)`` feature matrix in the current state."""
        ...

    def observe(self, action: str, observation: str) -> None:
        """Record the action taken and the environment's reply."""
        ...


class Agent(Protocol):
    env_id: str
    feature_names: tuple[str, ...]
    max_turns: int  # a hard stop in case an environment never ends an episode

    def start(self, task: Mapping[str, Any], observation: str, rng: np.random.Generator) -> EpisodeAgent: ...


class NoAgentError(LookupError):
    """The local backend has no policy for this environment."""


# env id → "module:class" of its agent, imported on first use (each agent loads its environment package).
AGENTS: dict[str, str] = {
    "wordle": "mtrl.local.agents.wordle:WordleAgent",
    "ask_to_code": "mtrl.local.agents.ask_to_code:AskToCodeAgent",
    "sop_support": "mtrl.local.agents.sop_support:SopSupportAgent",
}


def agent_for(env_id: str, **kwargs: Any) -> Agent:
    """The agent that plays ``env_id``; ``NoAgentError`` when the local backend has none."""
    target = AGENTS.get(env_id)
    if target is None:
        raise NoAgentError(
            f"the features policy exists only for {', '.join(sorted(AGENTS))} (hand-made feature agents), not for "
            f"'{env_id}': use a language-model policy instead (local backend: hyperparameter \"policy\": "
            '"hf:tiny-random" or "hf:MODEL", the default for other environments; '
            f"`mtrl env try {env_id} --policy hf:MODEL`)"
        )
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise NoAgentError(f"the local policy for '{env_id}' cannot be loaded ({error})") from error
    agent: Agent = getattr(module, class_name)(**kwargs)
    return agent
