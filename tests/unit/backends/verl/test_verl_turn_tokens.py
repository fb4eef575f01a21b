"""Turn tokens stay exact for both kinds of chat template, and a first prompt longer than max_prompt_length has a rule
(issue 35, defects 8 and 6).

The two templates below are written here to behave as the two families do (not copied from them):

- Qwen2.5-like: every turn ends ``<|im_end|>\\n``. The model stops at ``<|im_end|>``, so the newline belongs to the
  next turn's tokens (Qwen/Qwen2.5-*-Instruct ``tokenizer_config.json`` chat_template).
- Qwen3-like: the reply after the last user turn carries a ``<think>`` block, earlier replies are rendered without it
  (Qwen/Qwen3-* chat_template: ``loop.index0 > ns.last_query_index``), so a conversation with one more user turn does
  not start with the rendering of the conversation before it: the old prefix-difference fell back to the raw text.

verl appends the tokens of each observation to the sampled ones (token in, token out); the sequence must be what the
template renders for the same conversation, with the model's reply as it was sampled.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mtrl.backends.verl.bridge import PromptTooLong, TokenBridge, chat_ids, turn_tokens
from mtrl.backends.verl.smoke import byte_tokenizer
from mtrl.envs.rollout import ActionRequest

SPECIALS = ("<pad>", "<|im_start|>", "<|im_end|>", "<think>", "</think>")
QWEN25_LIKE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
QWEN3_LIKE = (
    "{%- set ns = namespace(last_user=-1) %}"
    "{%- for message in messages %}{%- if message['role'] == 'user' %}{%- set ns.last_user = loop.index0 %}"
    "{%- endif %}{%- endfor %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{%- set content = message['content'].split('</think>')[-1].lstrip('\\n') %}"
    "{%- if loop.index0 > ns.last_user %}"
    "{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' + content + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
SYSTEM = {"role": "system", "content": "Play."}
FIRST = {"role": "user", "content": "Guess a word."}


def tokenizer_with(template: str) -> Any:
    """A real fast tokenizer (byte level, no merges: any text round-trips) with Qwen's special tokens."""
    return byte_tokenizer(specials=SPECIALS, eos_token="<|im_end|>", chat_template=template)


def sampled(tokenizer: Any, text: str) -> list[int]:
    """A reply as the model samples it: its text, then the end-of-turn token it stops at."""
    return [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]


def rendered(tokenizer: Any, messages: list[dict[str, str]], *, generation_prompt: bool) -> list[int]:
    return chat_ids(tokenizer, messages, generation_prompt=generation_prompt)


def test_qwen25_like_turns_keep_the_newline_after_the_end_of_turn_token() -> None:
    tokenizer = tokenizer_with(QWEN25_LIKE)
    reply, observation = "crane", "C is in the word."
    sequence = [
        *rendered(tokenizer, [SYSTEM, FIRST], generation_prompt=True),
        *sampled(tokenizer, reply),
        *turn_tokens(tokenizer, observation, after_token=tokenizer.eos_token_id),
    ]
    conversation = [SYSTEM, FIRST, {"role": "assistant", "content": reply}, {"role": "user", "content": observation}]
    # Exactly the template's own rendering of the whole conversation.
    assert sequence == rendered(tokenizer, conversation, generation_prompt=True)


def test_qwen3_like_turns_get_their_role_header_and_generation_prompt() -> None:
    tokenizer = tokenizer_with(QWEN3_LIKE)
    observation = "C is in the word."
    turn = turn_tokens(tokenizer, observation, after_token=tokenizer.eos_token_id)
    expected = "\n<|im_start|>user\n" + observation + "<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.decode(turn, skip_special_tokens=False) == expected
    # The whole sequence is the template's rendering with the reply as the model sampled it (its <think> block kept:
    # token in, token out), so the prompt for the next reply is exactly the template's generation prompt.
    reply = "<think>\nshort\n</think>\n\ncrane"
    sequence = [*rendered(tokenizer, [SYSTEM, FIRST], generation_prompt=True), *sampled(tokenizer, reply), *turn]
    text = tokenizer.decode(sequence, skip_special_tokens=False)
    assert text.endswith("crane<|im_end|>\n<|im_start|>user\n" + observation + "<|im_end|>\n<|im_start|>assistant\n")


def test_a_reply_cut_before_its_end_token_gets_its_turn_closed() -> None:
    tokenizer = tokenizer_with(QWEN25_LIKE)
    cut = tokenizer.encode("cra", add_special_tokens=False)[-1]
    turn = turn_tokens(tokenizer, "more", after_token=cut)
    assert tokenizer.decode(turn, skip_special_tokens=False) == "<|im_end|>\n<|im_start|>user\nmore<|im_end|>\n" + (
        "<|im_start|>assistant\n"
    )


class OneReply:
    """verl's server manager interface, answering every request with one reply."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.prompts: list[list[int]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any]) -> Any:
        self.prompts.append(list(prompt_ids))
        ids = sampled(self.tokenizer, "crane")

        class Output:
            token_ids = ids
            log_probs = [-0.5] * len(ids)

        return Output()


def _first_action(tokenizer: Any, prompt_text: str, *, prompt_length: int, response_length: int) -> TokenBridge:
    server = OneReply(tokenizer)
    bridge = TokenBridge(
        tokenizer=tokenizer,
        server_manager=server,
        sampling_params={},
        response_length=response_length,
        prompt_length=prompt_length,
    )
    messages = [SYSTEM, {"role": "user", "content": prompt_text}]
    asyncio.run(bridge.act(ActionRequest(messages=messages, turn=0, deadline=None)))
    return bridge


def test_a_prompt_longer_than_max_prompt_length_carries_its_overflow_as_environment_tokens() -> None:
    """verl left-pads every prompt to max_prompt_length and concatenates the batch (AgentLoopWorker
    _agent_loop_postprocess, verl 0.9.1 experimental/agent_loop/agent_loop.py): a longer one broke torch.cat."""
    tokenizer = tokenizer_with(QWEN25_LIKE)
    text = "x" * 200
    whole = rendered(tokenizer, [SYSTEM, {"role": "user", "content": text}], generation_prompt=True)
    bridge = _first_action(tokenizer, text, prompt_length=100, response_length=400)
    assert len(bridge.prompt_ids) == 100
    overflow = len(whole) - 100
    # The model saw the whole prompt; the overflow is in the response window, masked out of the loss.
    assert bridge.prompt_ids + bridge.response_ids[:overflow] == whole
    assert bridge.response_mask[:overflow] == [0] * overflow
    assert bridge.response_mask[overflow:] == [1] * len(sampled(tokenizer, "crane"))
    assert len(bridge.response_ids) <= 400


def test_a_prompt_longer_than_both_windows_is_a_named_error() -> None:
    tokenizer = tokenizer_with(QWEN25_LIKE)
    with pytest.raises(PromptTooLong, match=r"max_prompt_length 100 \+ max_response_length 50"):
        _first_action(tokenizer, "x" * 400, prompt_length=100, response_length=50)
