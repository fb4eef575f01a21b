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

# The placeholder reply a turn is rendered after (characters no observation or template contains).
_REPLY_MARK = "\u2063mtrl-reply\u2063"


class PromptTooLong(ValueError):
    """An episode's first prompt does not fit the run's sequence (max_prompt_length + max_response_length)."""


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


def turn_tokens(
    tokenizer: Any,
    observation: str,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    *,
    after_token: int | None = None,
) -> list[int]:
    """The tokens a user turn adds after the model's reply: what the chat template renders after a reply — the end of
    the reply's turn, the user turn with its role header, the generation prompt of the next reply — less the reply's
    own last token (``after_token``, usually the end-of-turn token the model sampled, which is already in the sequence).

    Rendered with the reply in the middle of the conversation, where the template puts it in its earlier-turn form:
    templates that render the last reply differently (Qwen3 adds an empty ``<think>`` block to it) and templates that
    put a newline after each turn's end token (Qwen2.5: ``<|im_end|>\\n``) both come out exactly as the template says.
    """
    messages = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": _REPLY_MARK},
        {"role": "user", "content": observation},
    ]
    text = str(
        tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, **dict(chat_template_kwargs or {})
        )
    )
    tail = text[text.rindex(_REPLY_MARK) + len(_REPLY_MARK) :]
    if after_token is not None:
        ended = str(tokenizer.decode([after_token], skip_special_tokens=False))
        if ended and tail.startswith(ended):  # the model closed its turn itself
            tail = tail[len(ended) :]
    return [int(token) for token in tokenizer.encode(tail, add_special_tokens=False)]


@dataclass
class TokenBridge:
    """The policy side of one episode: keeps the token sequence and generates each action with verl's server."""

    tokenizer: Any
    server_manager: Any
    sampling_params: dict[str, Any]
    response_length: int
    # The run's max_prompt_length (verl left-pads every prompt to it). A longer first prompt keeps its first
    # prompt_length tokens as the prompt and carries the rest into the response window as environment tokens (mask 0,
    # never trained): the model sees the same sequence, the response budget shrinks by the overflow. A prompt longer
    # than both windows together raises PromptTooLong. None: no cap (tests of the token side alone).
    prompt_length: int | None = None
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    truncated: bool = False  # the response length ran out before the episode ended
    too_long: PromptTooLong | None = None  # raised at the first action (the episode driver records it as an error)

    async def act(self, request: ActionRequest) -> str:
        if request.turn == 0:
            kwargs = dict(self.chat_template_kwargs)
            self._start(chat_ids(self.tokenizer, request.messages, generation_prompt=True, **kwargs))
        else:
            last = self.response_ids[-1] if self.response_ids else None
            tokens = turn_tokens(self.tokenizer, request.observation, self.chat_template_kwargs, after_token=last)
            self._append(tokens, mask=0)
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

    def _start(self, prompt: list[int]) -> None:
        """The episode's first prompt, split at prompt_length (see the field)."""
        cap = self.prompt_length
        if cap is None or len(prompt) <= cap:
            self.prompt_ids = prompt
            return
        overflow = prompt[cap:]
        if len(overflow) >= self.response_length:
            self.too_long = PromptTooLong(
                f"the first prompt is {len(prompt)} tokens: it does not fit max_prompt_length {cap} + "
                f"max_response_length {self.response_length} with room for a reply (raise max_prompt_length)"
            )
            raise self.too_long
        self.prompt_ids = prompt[:cap]
        self._append(overflow, mask=0)

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
