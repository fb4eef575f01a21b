"""Wrap an mtrl environment as a ``verifiers`` ``MultiTurnEnv`` (the Nova Forge worker's contract).

Imported only from an environment's ``load_environment()``: ``verifiers`` (and ``datasets``) are heavy
and the Nova Forge worker ships its own fork, so nothing else in mtrl depends on them. The adapter keeps
one mtrl episode per rollout in the rollout ``state``, played by the one episode driver
(``mtrl.envs.rollout.Stepper``: verifiers owns the turns; the driver owns the rules, the string contract and
cleanup). Every reward component becomes a rubric function (weight 0 for components, weight 1 for the aggregate)
so each one is logged separately. When the rollout completes the episode is scored once and closed; the rubric
reads that result.

Tested against a stand-in for the ``verifiers`` API (``verifiers`` is not installed here).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from mtrl.contracts.environment import (
    DEFAULT_MAX_TURNS,
    DEFAULT_SYSTEM_PROMPT,
    Environment,
    EpisodeResult,
    close_environment,
)
from mtrl.envs.rollout import EpisodeRules, Stepper, checked_result

log = logging.getLogger("mtrl.envs.verifiers_adapter")

# What the Nova Forge reward workers run: the starter kit's fork, not on PyPI (reference: nova_forge_sdk_notes.md,
# anchor_wordle_sdk.md). The public `verifiers` (0.4.0 on PyPI) has another API and no MultiTurnEnv.
SUPPORTED_VERIFIERS = (
    "the Nova Forge starter kit's verifiers fork (amzn-agi-verifiers >= 1.0.3: MultiTurnEnv, Rubric), "
    "not the public verifiers package on PyPI"
)
REQUIRED_API = ("MultiTurnEnv", "Rubric")


class UnsupportedVerifiersError(ImportError):
    """The importable ``verifiers`` is not the API this adapter is written for (the message says which it needs)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, name="verifiers")


def _last_assistant_text(messages: Any) -> str:
    if isinstance(messages, str):
        return messages
    for message in reversed(list(messages)):
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            content = message.get("content") or ""
            return content if isinstance(content, str) else str(content)
    return ""


def to_verifiers_environment(
    make_env: Callable[..., Environment],
    *,
    validate_task: Callable[[dict[str, Any]], list[str]],
    dataset: Any = None,
    eval_dataset: Any = None,
    component_names: list[str] | None = None,
    max_turns: int = DEFAULT_MAX_TURNS,
    system_prompt: str = DEFAULT_SYSTEM_PROMPT,
    env_kwargs: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """Build the verifiers environment; ``component_names`` lists components to log individually.

    ``max_turns`` and ``system_prompt`` are the environment's own (its ``MAX_TURNS`` / ``SYSTEM_PROMPT``): verifiers
    gets them, and the episode is played under the same rules by the one episode driver (``mtrl.envs.rollout``).
    """
    # Deliberately lazy (see the module docstring); typed as Any since no stubs exist for the fork.
    vf: Any = importlib.import_module("verifiers")
    missing = [name for name in REQUIRED_API if not hasattr(vf, name)]
    if missing:
        raise UnsupportedVerifiersError(
            f"the installed verifiers ({getattr(vf, '__version__', 'version unknown')}) has no "
            f"{', '.join(missing)}: this adapter is written for {SUPPORTED_VERIFIERS}"
        )

    episode_kwargs = dict(env_kwargs or {})
    rules = EpisodeRules(max_turns=max_turns, system_prompt=system_prompt)

    def _metadata(state: dict[str, Any]) -> dict[str, Any]:
        return {
            "prompt": state.get("prompt", ""),
            "answer": state.get("answer", ""),
            "task": state.get("task", ""),
            "info": state.get("info") or {},
        }

    def _stepper(state: dict[str, Any]) -> Stepper | None:
        """The rollout's episode (started on first use); None for a task the environment cannot start."""
        if "mtrl_task_problems" not in state:
            metadata = _metadata(state)
            problems = validate_task(metadata)
            state["mtrl_task_problems"] = problems
            if problems:
                state["mtrl_env"] = make_env(**episode_kwargs)  # never reset: scored as it stands, then closed
            else:
                started = Stepper(make_env(**episode_kwargs), metadata, rules)
                state["mtrl_stepper"] = started
                request = started.request
                state["mtrl_first_observation"] = request.observation if request is not None else ""
        stepper = state.get("mtrl_stepper")
        return stepper if isinstance(stepper, Stepper) else None

    def _finish(state: dict[str, Any]) -> EpisodeResult:
        """The rollout is over: score it once, release the episode's resources, keep the result for the rubric.

        Called when ``is_completed`` first says so, or by the first rubric function (a rollout verifiers ended
        at its own ``max_turns`` is scored after it, and closed then).
        """
        cached = state.get("mtrl_result")
        if isinstance(cached, EpisodeResult):
            return cached
        stepper = _stepper(state)
        if stepper is None:
            env: Environment = state["mtrl_env"]
            try:
                result = checked_result(env.result())  # finite numbers only, as the driver's own episodes
            finally:
                close_environment(env)
        else:
            rollout = stepper.finish()
            rollout.raise_error()
            assert rollout.result is not None  # no error: result() returned
            result = rollout.result
        state["mtrl_result"] = result
        return result

    class MtrlMultiTurnEnv(vf.MultiTurnEnv):  # type: ignore[misc]
        async def env_response(self, messages: Any, state: dict[str, Any], **_: Any) -> Any:
            stepper = _stepper(state)
            if stepper is None:
                return [{"role": "user", "content": "Invalid task: " + "; ".join(state["mtrl_task_problems"])}], state
            request = stepper.act(_last_assistant_text(messages))
            if request is not None:
                return [{"role": "user", "content": request.observation}], state
            rollout = stepper.finish()
            if rollout.error is not None:
                log.warning("the episode ended with an error: %s", rollout.error_text)
            last = rollout.messages[-1]
            return [{"role": "user", "content": last["content"] if last["role"] == "user" else ""}], state

        async def is_completed(self, messages: Any, state: dict[str, Any], **_: Any) -> bool:
            stepper = _stepper(state)
            if stepper is None:
                return True  # never reset: the rubric scores it as before (and closes it then)
            if stepper.ended:
                _finish(state)
            return stepper.ended

    def aggregate(state: dict[str, Any], **_: Any) -> float:
        return float(_finish(state).reward)

    funcs: list[Callable[..., float]] = [aggregate]
    weights = [1.0]
    for name in component_names or []:

        def component(state: dict[str, Any], _name: str = name, **_: Any) -> float:
            return float(_finish(state).components.get(_name, 0.0))

        component.__name__ = name
        funcs.append(component)
        weights.append(0.0)
    rubric = vf.Rubric(funcs=funcs, weights=weights)
    return MtrlMultiTurnEnv(
        dataset=dataset,
        eval_dataset=eval_dataset,
        rubric=rubric,
        max_turns=max_turns,
        system_prompt=system_prompt,
        **kwargs,
    )
