"""How long a dataset row's prompt is at least, in tokens, without a tokenizer: the rule behind refusing rows that
cannot fit a run's prompt length (issue 38 item 5).

The rule: **a prompt has at least as many tokens as words** (maximal runs of non-whitespace characters, as
``str.split`` counts them). Every tokenizer the backends train — byte-level BPE whose pre-tokenizer splits text at
whitespace (GPT-2's pattern and its descendants: Qwen2/2.5/3, Llama 3) and SentencePiece with whitespace splitting
— starts a new token at each word, so a prompt of more words than the run's ``max_prompt_length`` cannot fit,
whatever the model. It is a lower bound: a row under it may still be too long in tokens (a long run of characters
without whitespace is one word), which the trainer's own length handling catches.

The text counted is what the verl dataset tokenizes: the row's ``prompt`` string, or the JSON text of a message list
(``mtrl.backends.verl.train.verl_rows``). ``LongestPrompts`` keeps the few longest of a file with their line
numbers, which Validate writes to ``validation.json`` and the backend's Preflight compares with the run's lengths.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Mapping
from typing import Any

KEPT = 20  # the longest prompts a report names; Preflight names every one of them over the limit


def prompt_text(metadata: Mapping[str, Any]) -> str:
    prompt = metadata.get("prompt", "")
    return prompt if isinstance(prompt, str) else json.dumps(prompt, ensure_ascii=False)


def token_lower_bound(text: str) -> int:
    """Words: the fewest tokens ``text`` can take (see the module docstring)."""
    return len(text.split())


class LongestPrompts:
    """The ``KEPT`` rows with the most prompt words. A row is measured only when its text could beat the shortest
    kept (a word needs a character and a separator), so a file of similar rows is measured about once per row only
    while the list fills."""

    def __init__(self, kept: int = KEPT) -> None:
        self._kept = kept
        self._heap: list[tuple[int, int]] = []  # (words, -line): the smallest first

    def add(self, line: int, metadata: Mapping[str, Any]) -> None:
        text = prompt_text(metadata)
        if len(self._heap) >= self._kept and (len(text) + 1) // 2 <= self._heap[0][0]:
            return
        entry = (token_lower_bound(text), -line)
        if len(self._heap) < self._kept:
            heapq.heappush(self._heap, entry)
        elif entry > self._heap[0]:
            heapq.heapreplace(self._heap, entry)

    def to_list(self) -> list[dict[str, int]]:
        """Longest first: ``[{"line": n, "tokens_at_least": words}, ...]``."""
        return [{"line": -line, "tokens_at_least": words} for words, line in sorted(self._heap, reverse=True)]


def over_limit(longest: Any, limit: int) -> list[dict[str, int]]:
    """The entries of a report's ``longest_prompts`` that cannot fit ``limit`` tokens (malformed entries skipped)."""
    if not isinstance(longest, list):
        return []
    return [
        entry
        for entry in longest
        if isinstance(entry, dict)
        and isinstance(entry.get("line"), int)
        and isinstance(entry.get("tokens_at_least"), int)
        and entry["tokens_at_least"] > limit
    ]
