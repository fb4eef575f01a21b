"""The shipped word lists (see build_word_lists.py and data/LICENSE-SCOWL.txt) and a bitmask index.

The index lets the game filter candidate answers with a handful of big-integer ANDs instead of scanning
the answer list: bit ``i`` of a mask stands for ``answers[i]``.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
WORD_LENGTH = 5
ALPHABET = "abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class WordData:
    answers: tuple[str, ...]
    answer_set: frozenset[str]
    allowed: frozenset[str]
    entropy: dict[str, float]
    # at[position][letter] -> answers with that letter at that position
    at: tuple[dict[str, int], ...]
    # count_at_least[letter][k] -> answers with at least k copies of the letter (k = 0..WORD_LENGTH + 1)
    count_at_least: dict[str, tuple[int, ...]]
    all_answers: int

    @classmethod
    def build(cls, answers: list[str], allowed: set[str], entropy: dict[str, float]) -> WordData:
        ordered = tuple(sorted(set(answers)))
        bad = [word for word in ordered if len(word) != WORD_LENGTH or not set(word) <= set(ALPHABET)]
        if bad:
            raise ValueError(f"answers must be {WORD_LENGTH} lowercase letters a-z: {bad[:5]}")
        missing = sorted(set(ordered) - allowed)
        if missing:
            raise ValueError(f"every answer must also be an allowed guess: {missing[:5]}")
        at = tuple(dict.fromkeys(ALPHABET, 0) for _ in range(WORD_LENGTH))
        counts = {letter: [0] * (WORD_LENGTH + 2) for letter in ALPHABET}
        for index, word in enumerate(ordered):
            bit = 1 << index
            for position, letter in enumerate(word):
                at[position][letter] |= bit
            for letter in ALPHABET:
                for k in range(word.count(letter) + 1):
                    counts[letter][k] |= bit
        return cls(
            answers=ordered,
            answer_set=frozenset(ordered),
            allowed=frozenset(allowed),
            entropy=dict(entropy),
            at=at,
            count_at_least={letter: tuple(values) for letter, values in counts.items()},
            all_answers=(1 << len(ordered)) - 1,
        )

    def words_in(self, mask: int) -> list[str]:
        return [word for index, word in enumerate(self.answers) if mask >> index & 1]

    def first_in(self, mask: int) -> str | None:
        """The alphabetically first answer in ``mask`` (cheap: lowest set bit)."""
        if not mask:
            return None
        return self.answers[(mask & -mask).bit_length() - 1]


def _read_list(name: str) -> list[str]:
    return [line.strip() for line in (DATA_DIR / name).read_text(encoding="utf-8").splitlines() if line.strip()]


@functools.cache
def default_words() -> WordData:
    """The shipped lists, loaded once per process."""
    entropy = json.loads((DATA_DIR / "word_entropy.json").read_text(encoding="utf-8"))
    return WordData.build(_read_list("answers.txt"), set(_read_list("allowed_guesses.txt")), entropy)
