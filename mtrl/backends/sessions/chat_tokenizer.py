"""A Hugging Face tokenizer as the sessions loop's ``ChatTokenizer``: the model's chat template rendered to token ids,
and decoding. It calls the tokenizer object it is given and imports nothing itself, so the module loads where
``transformers`` is absent."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class HFChatTokenizer:
    """``tokenizer``: a ``transformers`` tokenizer with a chat template. ``extra_eos_ids``: further end-of-turn ids
    (a template whose turn end is not the tokenizer's ``eos_token``, such as Llama 3's ``<|eot_id|>``)."""

    def __init__(self, tokenizer: Any, *, extra_eos_ids: Sequence[int] = ()) -> None:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("the tokenizer has no chat template; use an instruction-tuned (chat) model")
        self.hf_tokenizer = tokenizer
        ids = [int(tokenizer.eos_token_id)] if tokenizer.eos_token_id is not None else []
        self._eos = tuple(dict.fromkeys([*ids, *(int(i) for i in extra_eos_ids)]))
        if not self._eos:
            raise ValueError("the tokenizer has no end-of-sequence token")

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self._eos

    def render(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool) -> list[int]:
        # Rendered to text, then encoded without added specials: the template writes its own BOS/markers.
        text = self.hf_tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=add_generation_prompt
        )
        return [int(i) for i in self.hf_tokenizer(text, add_special_tokens=False)["input_ids"]]

    def decode(self, tokens: Sequence[int]) -> str:
        return str(self.hf_tokenizer.decode(list(tokens), skip_special_tokens=True)).strip()
