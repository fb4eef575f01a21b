"""The token side of the verl bridge, free of verl imports (so it is benchmarked and unit-tested anywhere).

``TokenBridge`` is the policy one episode is played with by the one episode driver: it keeps the episode's token
sequence (the chat-templated prompt, then the model's sampled tokens with mask 1 and each observation rendered as a
user turn with mask 0), generates each action through verl's server manager (any object with verl's
``generate(request_id, *, prompt_ids, sampling_params)`` returning ``token_ids``/``log_probs``) and stops the
episode when the response length is used up.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mtrl.contracts.environment import MALFORMED_ACTIONS
from mtrl.envs.rollout import ActionRequest, Rollout, StopEpisode

NAN = float("nan")
# The per-sample field that names the sample's task: the dataset row's ``extra_info["index"]`` (``verl_rows``). GRPO
# groups the samples of one prompt; a step's rollout dump is regrouped by it (``rollout_rows``), never by the prompt's
# text, which every task of an environment may share (each wordle game opens with the same prompt).
TASK_INDEX = "task_index"

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


def reward_extra_info(rollout: Rollout, *, truncated: bool, task_index: float = NAN) -> dict[str, Any]:
    """Per-sample fields verl adds to the batch: success, evaluation, malformed actions, how the episode ended and
    which task it played (``TASK_INDEX``; NaN when the row carries none).

    The same keys for every sample of every environment: verl builds the batch's columns from the first sample's
    keys and reads each sample with them (``AgentLoopWorker``, verl 0.9 agent_loop.py), so an episode that errored
    before its result, or another environment's components in the same batch, would stop training with a KeyError.
    The reward's components go out with the episode's metrics lines instead (``mtrl.health.emf``).
    """
    result = rollout.result
    # Numbers only: verl averages these fields into its metrics (NaN where the environment declares no evaluation).
    return {
        "success": float(result.success) if result is not None else 0.0,
        "evaluation": float(result.evaluation) if result is not None and result.evaluation is not None else NAN,
        "turns": float(rollout.turns),
        "hit_turn_limit": float(rollout.hit_turn_limit),
        "truncated": float(truncated),
        "error": float(rollout.status == "error"),
        "timeout": float(rollout.status == "timeout"),
        MALFORMED_ACTIONS: float(result.metrics.get(MALFORMED_ACTIONS, 0)) if result is not None else 0.0,
        TASK_INDEX: float(task_index),
    }
