"""Episodes of any environment played by a chat policy, through the environment contract alone.

The conversation is: the environment's optional ``SYSTEM_PROMPT`` as the system message, ``reset(task)`` as the
first user message, then each reply goes to ``step`` and each observation comes back as the next user message,
until ``done`` or ``max_turns``; ``result()`` scores it. Episodes of one call are generated in one batch per turn.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mtrl.envs.contract import Environment, EpisodeResult, closing
from mtrl.envs.registry import EnvironmentSpec
from mtrl.llm.policies import ChatPolicy, Context, Sampling

Task = Mapping[str, Any]


@dataclass
class Episode:
    task: dict[str, Any]
    transcript: list[dict[str, str]]
    result: EpisodeResult
    turns: int
    prompt_tokens: int  # summed over turns: what the model read
    completion_tokens: int  # what it wrote
    seconds: float  # this episode's share of the batch's wall time
    context: Context = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "transcript": self.transcript,
            "result": self.result.to_dict(),
            "turns": self.turns,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


def system_prompt(spec: EnvironmentSpec) -> str | None:
    value = getattr(spec.module, "SYSTEM_PROMPT", None)
    return value if isinstance(value, str) and value.strip() else None


def play(
    spec: EnvironmentSpec,
    policy: ChatPolicy,
    tasks: Sequence[Task],
    *,
    sampling: Sampling,
    max_turns: int,
    env_args: Mapping[str, Any] | None = None,
) -> list[Episode]:
    """One episode per entry of ``tasks`` (repeat a task for a group), all advanced together turn by turn.

    Every environment is closed (``contract.closing``) when this returns or raises.
    """
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        envs = [stack.enter_context(closing(spec.make(**dict(env_args or {})))) for _ in tasks]
        return _play_envs(envs, spec, policy, tasks, sampling=sampling, max_turns=max_turns, started=started)


def _play_envs(
    envs: list[Environment],
    spec: EnvironmentSpec,
    policy: ChatPolicy,
    tasks: Sequence[Task],
    *,
    sampling: Sampling,
    max_turns: int,
    started: float,
) -> list[Episode]:
    system = system_prompt(spec)
    contexts: list[Context] = []
    transcripts: list[list[dict[str, str]]] = []
    for env, task in zip(envs, tasks, strict=True):
        observation = env.reset(task)
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": observation}
        ]
        contexts.append(policy.begin(messages))
        transcripts.append([{"role": "environment", "content": observation}])
    turns = [0] * len(tasks)
    prompt_tokens = [0] * len(tasks)
    completion_tokens = [0] * len(tasks)
    active = [index for index, env in enumerate(envs) if not env.done]
    while active:
        replies = policy.generate([contexts[index] for index in active], sampling)
        still: list[int] = []
        for index, reply in zip(active, replies, strict=True):
            step = envs[index].step(reply.text)
            turns[index] += 1
            prompt_tokens[index] += reply.prompt_tokens
            completion_tokens[index] += reply.completion_tokens
            transcripts[index] += [
                {"role": "policy", "content": reply.text},
                {"role": "environment", "content": step.observation},
            ]
            going_on = not envs[index].done and turns[index] < max_turns
            policy.extend(contexts[index], reply, step.observation if going_on else None)
            if going_on:
                still.append(index)
        active = still
    share = (time.perf_counter() - started) / max(1, len(tasks))
    return [
        Episode(
            task=dict(task),
            transcript=transcripts[index],
            result=envs[index].result(),
            turns=turns[index],
            prompt_tokens=prompt_tokens[index],
            completion_tokens=completion_tokens[index],
            seconds=share,
            context=contexts[index],
        )
        for index, task in enumerate(tasks)
    ]


def play_groups(
    spec: EnvironmentSpec,
    policy: ChatPolicy,
    tasks: Sequence[Task],
    *,
    group_size: int,
    sampling: Sampling,
    max_turns: int,
    env_args: Mapping[str, Any] | None = None,
) -> list[list[Episode]]:
    """``group_size`` rollouts of each task (a GRPO group), generated in one batch."""
    repeated = [task for task in tasks for _ in range(group_size)]
    episodes = play(spec, policy, repeated, sampling=sampling, max_turns=max_turns, env_args=env_args)
    return [episodes[start : start + group_size] for start in range(0, len(episodes), group_size)]
