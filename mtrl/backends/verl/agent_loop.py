"""verl's agent loop for mtrl environments: every rollout is an mtrl episode, played token-exact.

``MtrlAgentLoop`` (registered as ``mtrl``; rows choose it with ``agent_name: "mtrl"``) is a subclass of verl's real
``AgentLoopBase``. For each dataset row it makes the row's environment and plays it through the one episode driver
(``mtrl.envs.rollout.play_async``), so the turn limit, the system prompt, the string contract, the deadline and
``close()`` are exactly those of ``mtrl env try``, the reward workers and the serverless agent. Each turn:

- the conversation so far is the token sequence: the chat-templated prompt (system prompt + first observation), then
  the model's own sampled tokens (mask 1), then each observation rendered as a user turn (mask 0) — token in, token
  out, never re-templated (re-templating the final messages broke convergence in verl's experiments);
- ``server_manager.generate`` samples the next tokens, which are decoded into the action the environment steps;
- the episode stops at the environment's turn limit, its end, the deadline, or when the response length is used up.

``reward_score`` is the environment's reward (verl then skips its own reward computation); the named components,
``success``, ``evaluation`` and the driver's end reason go to ``extra_fields["reward_extra_info"]``.

Rows (written by the verl backend's dataset conversion): ``extra_info`` holds ``env_id``, ``task`` (the mtrl row's
``metadata``) and optionally ``env_args``. The trainer config's optional ``mtrl.episode_timeout_s`` is the deadline.

Only the stable core of verl's agent-loop API is used (``run``, ``AgentLoopOutput``, ``server_manager.generate``):
observations are tokenized here, so none of verl's churning Continuous Token helpers are needed. verl is pinned
exactly (requirements/verl.txt) and this module is tested against the real classes on CPU (``.venv-verl``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from mtrl.envs.registry import load_spec
from mtrl.envs.rollout import ActionRequest, Rollout, StopEpisode, play_async

AGENT_NAME = "mtrl"
NAN = float("nan")
# A placeholder conversation whose rendering is the prefix every later user turn is appended to.
_PREFIX = [
    {"role": "system", "content": "x"},
    {"role": "user", "content": "x"},
    {"role": "assistant", "content": "x"},
]


def chat_ids(
    tokenizer: Any, messages: Sequence[Mapping[str, str]], *, generation_prompt: bool, **kwargs: Any
) -> list[int]:
    """The token ids of a chat-templated conversation (transformers 5 returns an encoding, earlier a list)."""
    rendered = tokenizer.apply_chat_template(
        list(messages), add_generation_prompt=generation_prompt, tokenize=True, **kwargs
    )
    if isinstance(rendered, Mapping) or hasattr(rendered, "keys"):
        rendered = rendered["input_ids"]
    if rendered and isinstance(rendered[0], list):
        rendered = rendered[0]
    return [int(token) for token in rendered]


def turn_tokens(tokenizer: Any, observation: str, chat_template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
    """The tokens a user turn adds after the model's reply, with the generation prompt of the next reply.

    Rendered as the difference between a conversation with and without the turn, so the chat template decides
    the turn's framing; a template that does not preserve the prefix falls back to the turn's text alone.
    """
    kwargs = dict(chat_template_kwargs or {})
    base = chat_ids(tokenizer, _PREFIX, generation_prompt=False, **kwargs)
    full = chat_ids(tokenizer, [*_PREFIX, {"role": "user", "content": observation}], generation_prompt=True, **kwargs)
    if full[: len(base)] == base:
        return full[len(base) :]
    return list(tokenizer.encode(observation, add_special_tokens=False))


@dataclass
class TokenBridge:
    """The policy side of one episode: keeps the token sequence and generates each action with verl's server."""

    tokenizer: Any
    server_manager: Any
    sampling_params: dict[str, Any]
    response_length: int
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    truncated: bool = False  # the response length ran out before the episode ended

    async def act(self, request: ActionRequest) -> str:
        if request.turn == 0:
            self.prompt_ids = chat_ids(
                self.tokenizer, request.messages, generation_prompt=True, **dict(self.chat_template_kwargs)
            )
        else:
            self._append(turn_tokens(self.tokenizer, request.observation, self.chat_template_kwargs), mask=0)
        budget = self.response_length - len(self.response_ids)
        if budget <= 0:
            self.truncated = True
            raise StopEpisode
        output = await self.server_manager.generate(
            self.request_id,
            prompt_ids=self.prompt_ids + self.response_ids,
            sampling_params={**self.sampling_params, "max_tokens": budget},
        )
        tokens = list(output.token_ids)[:budget]
        logprobs = list(output.log_probs or [])[: len(tokens)]
        self._append(tokens, mask=1, logprobs=logprobs + [0.0] * (len(tokens) - len(logprobs)))
        if len(self.response_ids) >= self.response_length:
            self.truncated = True
        return str(self.tokenizer.decode(tokens, skip_special_tokens=True)).strip()

    def _append(self, tokens: Sequence[int], *, mask: int, logprobs: Sequence[float] | None = None) -> None:
        room = self.response_length - len(self.response_ids)
        kept = list(tokens)[: max(room, 0)]
        if len(kept) < len(tokens):
            self.truncated = True
        self.response_ids += kept
        self.response_mask += [mask] * len(kept)
        self.response_logprobs += list(logprobs or [0.0] * len(kept))[: len(kept)]


def reward_extra_info(rollout: Rollout, *, truncated: bool) -> dict[str, Any]:
    """Per-sample fields verl adds to the batch: every component, success, evaluation and how the episode ended."""
    result = rollout.result
    # Numbers only: verl averages these fields into its metrics (NaN where the environment declares no evaluation).
    info: dict[str, Any] = {
        "success": float(result.success) if result is not None else 0.0,
        "evaluation": float(result.evaluation) if result is not None and result.evaluation is not None else NAN,
        "turns": float(rollout.turns),
        "hit_turn_limit": float(rollout.hit_turn_limit),
        "truncated": float(truncated),
        "error": float(rollout.status == "error"),
        "timeout": float(rollout.status == "timeout"),
    }
    if result is not None:
        info.update({f"component/{name}": float(value) for name, value in result.components.items()})
        info.update({f"metric/{name}": float(value) for name, value in result.metrics.items()})
    return info


@register(AGENT_NAME)
class MtrlAgentLoop(AgentLoopBase):  # type: ignore[misc]
    """One mtrl episode per dataset row (see the module docstring)."""

    error_reward: float = -1.0  # only when the environment could not even score the episode

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        mtrl_config = self.config.get("mtrl") or {}
        timeout = mtrl_config.get("episode_timeout_s")
        self.episode_timeout_s = float(timeout) if timeout else None

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        extra = kwargs.get("extra_info") or {}
        spec = load_spec(str(extra["env_id"]))
        task = dict(extra.get("task") or {})
        bridge = TokenBridge(
            tokenizer=self.tokenizer,
            server_manager=self.server_manager,
            sampling_params=dict(sampling_params),
            response_length=int(self.rollout_config.response_length),
            chat_template_kwargs=dict(self.apply_chat_template_kwargs or {}),
        )
        env = spec.make(**dict(extra.get("env_args") or {}))
        rollout = await play_async(env, task, bridge.act, spec.rules(timeout_s=self.episode_timeout_s))
        reward = rollout.reward if rollout.reward is not None else self.error_reward
        if not bridge.prompt_ids:  # the episode ended before its first action (done at reset, or an error)
            bridge.prompt_ids = chat_ids(self.tokenizer, rollout.messages[:2], generation_prompt=True)
        if not bridge.response_ids:  # verl places the reward on the last response token: there must be one
            bridge._append([int(self.tokenizer.eos_token_id)], mask=0)
        return AgentLoopOutput(
            prompt_ids=bridge.prompt_ids,
            response_ids=bridge.response_ids,
            response_mask=bridge.response_mask,
            response_logprobs=bridge.response_logprobs,
            reward_score=reward,
            num_turns=len(rollout.transcript),
            metrics=AgentLoopMetrics(),
            extra_fields={"reward_extra_info": reward_extra_info(rollout, truncated=bridge.truncated)},
        )
