"""Wrap an mtrl environment as a ``verifiers`` ``MultiTurnEnv`` (the Nova Forge worker's contract).

Imported only from an environment's ``load_environment()``: ``verifiers`` (and ``datasets``) are heavy
and the Nova Forge worker ships its own fork, so nothing else in mtrl depends on them. The adapter keeps
one mtrl episode per rollout in the rollout ``state``; every reward component becomes a rubric function
(weight 0 for components, weight 1 for the aggregate) so each one is logged separately. When the rollout
completes the episode is scored once and closed (``contract.close_environment``); the rubric reads that result.

Not exercised in this repository's tests (``verifiers`` is not installed here); the mtrl core it wraps is.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from mtrl.envs.contract import Environment, EpisodeResult, close_environment


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
    max_turns: int = 32,
    env_kwargs: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """Build the verifiers environment; ``component_names`` lists components to log individually."""
    # Deliberately lazy (see the module docstring); typed as Any since no stubs exist for the fork.
    vf: Any = importlib.import_module("verifiers")

    episode_kwargs = dict(env_kwargs or {})

    def _episode(state: dict[str, Any]) -> Environment:
        env = state.get("mtrl_env")
        if env is None:
            metadata = {
                "prompt": state.get("prompt", ""),
                "answer": state.get("answer", ""),
                "task": state.get("task", ""),
                "info": state.get("info") or {},
            }
            problems = validate_task(metadata)
            env = make_env(**episode_kwargs)
            state["mtrl_env"] = env
            state["mtrl_first_observation"] = "" if problems else env.reset(metadata)
            state["mtrl_task_problems"] = problems
        return env

    def _finish(state: dict[str, Any]) -> EpisodeResult:
        """The rollout is over: score it once, release the episode's resources, keep the result for the rubric.

        Called when ``is_completed`` first says so, or by the first rubric function (a rollout verifiers ended
        at its own ``max_turns`` is scored after it, and closed then).
        """
        cached = state.get("mtrl_result")
        if isinstance(cached, EpisodeResult):
            return cached
        env = _episode(state)
        try:
            result = env.result()
            state["mtrl_result"] = result
        finally:
            close_environment(env)
        return result

    def _result(state: dict[str, Any]) -> EpisodeResult:
        return _finish(state)

    class MtrlMultiTurnEnv(vf.MultiTurnEnv):  # type: ignore[misc]
        async def env_response(self, messages: Any, state: dict[str, Any], **_: Any) -> Any:
            env = _episode(state)
            if state.get("mtrl_task_problems"):
                return [{"role": "user", "content": "Invalid task: " + "; ".join(state["mtrl_task_problems"])}], state
            step = env.step(_last_assistant_text(messages))
            return [{"role": "user", "content": step.observation}], state

        async def is_completed(self, messages: Any, state: dict[str, Any], **_: Any) -> bool:
            env = _episode(state)
            if state.get("mtrl_task_problems"):
                return True  # never reset: the rubric scores it as before (and closes it then)
            if env.done:
                _finish(state)
            return env.done

    def aggregate(state: dict[str, Any], **_: Any) -> float:
        return float(_result(state).reward)

    funcs: list[Callable[..., float]] = [aggregate]
    weights = [1.0]
    for name in component_names or []:

        def component(state: dict[str, Any], _name: str = name, **_: Any) -> float:
            return float(_result(state).components.get(_name, 0.0))

        component.__name__ = name
        funcs.append(component)
        weights.append(0.0)
    rubric = vf.Rubric(funcs=funcs, weights=weights)
    return MtrlMultiTurnEnv(dataset=dataset, eval_dataset=eval_dataset, rubric=rubric, max_turns=max_turns, **kwargs)
