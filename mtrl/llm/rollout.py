"""Episodes of any environment played by a chat policy, through the one episode driver (``mtrl.envs.rollout``).

The driver owns the game (the environment's turn limit and system prompt, chat roles, cleanup); this module feeds
it a chat policy: episodes of one call are generated in one batch per turn, each keeping its own ``Context`` (the
token sequence GRPO later trains on).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mtrl.contracts.environment import Environment, EpisodeResult, close_environment
from mtrl.envs.registry import EnvironmentSpec
from mtrl.envs.rollout import ActionRequest, Rollout, play_batch
from mtrl.llm.policies import ChatPolicy, Context, Reply, Sampling

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
    rollout: Rollout | None = field(default=None, repr=False)  # the driver's record (end reason, turn limit)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "transcript": self.transcript,
            "result": self.result.to_dict(),
            "turns": self.turns,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


def play(
    spec: EnvironmentSpec,
    policy: ChatPolicy,
    tasks: Sequence[Task],
    *,
    sampling: Sampling,
    max_turns: int | None = None,
    env_args: Mapping[str, Any] | None = None,
) -> list[Episode]:
    """One episode per entry of ``tasks`` (repeat a task for a group), all advanced together turn by turn, under
    the environment's rules (``max_turns`` may only lower its limit, for a quick dry run).

    Every environment is closed when this returns or raises; an exception an episode raised is raised again.
    """
    started = time.perf_counter()
    envs: list[Environment] = []
    try:
        envs = [spec.make(**dict(env_args or {})) for _ in tasks]
    except BaseException:
        for env in envs:
            close_environment(env)
        raise
    contexts: dict[int, Context] = {}
    last_reply: dict[int, Reply] = {}

    def generate(requests: Sequence[tuple[int, ActionRequest]]) -> list[Reply]:
        batch: list[Context] = []
        for index, request in requests:
            if index in contexts:  # the reply before this request led to the newest observation
                policy.extend(contexts[index], last_reply[index], request.observation)
            else:
                contexts[index] = policy.begin(list(request.messages))
            batch.append(contexts[index])
        replies = policy.generate(batch, sampling)
        for (index, _), reply in zip(requests, replies, strict=True):
            last_reply[index] = reply
        return replies

    rollouts = play_batch(envs, tasks, generate, spec.rules(max_turns=max_turns))
    for index, reply in last_reply.items():  # the final reply ends the episode: no observation follows it
        policy.extend(contexts[index], reply, None)
    for rollout in rollouts:
        rollout.raise_error()
    share = (time.perf_counter() - started) / max(1, len(tasks))
    return [
        Episode(
            task=rollout.task,
            transcript=rollout.transcript,
            result=_result(rollout),
            turns=rollout.turns,
            prompt_tokens=sum(reply.prompt_tokens for reply in rollout.replies),
            completion_tokens=sum(reply.completion_tokens for reply in rollout.replies),
            seconds=share,
            context=contexts.get(index) or policy.begin(rollout.messages),
            rollout=rollout,
        )
        for index, rollout in enumerate(rollouts)
    ]


def _result(rollout: Rollout) -> EpisodeResult:
    assert rollout.result is not None  # raise_error() passed: result() returned
    return rollout.result


def play_groups(
    spec: EnvironmentSpec,
    policy: ChatPolicy,
    tasks: Sequence[Task],
    *,
    group_size: int,
    sampling: Sampling,
    max_turns: int | None = None,
    env_args: Mapping[str, Any] | None = None,
) -> list[list[Episode]]:
    """``group_size`` rollouts of each task (a GRPO group), generated in one batch."""
    repeated = [task for task in tasks for _ in range(group_size)]
    episodes = play(spec, policy, repeated, sampling=sampling, max_turns=max_turns, env_args=env_args)
    return [episodes[start : start + group_size] for start in range(0, len(episodes), group_size)]
