"""The wordle agent: candidate guesses scored by a handful of features of (guess, clues so far).

The policy never sees the answer. It keeps the set of answer-list words still consistent with the
feedback it was shown and offers, each turn, a seeded sample of consistent words, a sample of other words
(probes) and the words it already guessed. Features, all in [0, 1]:

- ``consistent``: the guess could still be the answer;
- ``win_chance``: 1 / remaining if consistent (what a guess is worth late in the game);
- ``information``: entropy of the feedback the guess would get over the remaining words, / log2(remaining);
- ``elimination``: expected share of remaining words a guess rules out;
- ``letter_coverage``: how common its distinct letters are among the remaining words;
- ``repeated_letters``: (5 − distinct letters) / 4;
- ``already_guessed``: it was guessed before (a wasted turn).

Untrained (all weights 0) the policy picks uniformly among these candidates, mostly probes and
inconsistent words, and rarely solves; GRPO learns to weigh consistency, information and win chance.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from mtrl.envs.registry import load_spec
from mtrl.local.policy import FloatArray

IntArray = NDArray[np.int64]
FEATURES: tuple[str, ...] = (
    "consistent",
    "win_chance",
    "information",
    "elimination",
    "letter_coverage",
    "repeated_letters",
    "already_guessed",
)
WORD_LENGTH = 5
ALL_GREEN = 3**WORD_LENGTH - 1  # feedback code of a solved guess (every position 2 = green)
_FEEDBACK = re.compile(r"\b([a-z]{5})\b\W{0,6}\b([GYX]{5})\b", re.IGNORECASE)
_TILE = {"G": 2, "Y": 1, "X": 0}


def encode(words: Sequence[str]) -> IntArray:
    return np.array([[ord(ch) - 97 for ch in word] for word in words], dtype=np.int64)


def feedback_codes(guess: IntArray, answers: IntArray) -> IntArray:
    """Wordle feedback of one guess against many answers, as base-3 codes (X=0, Y=1, G=2, first letter first).

    Duplicate letters follow the game's rule: greens first, then yellows left to right while the answer
    still has unmatched copies of that letter.
    """
    green = answers == guess[None, :]
    counts = np.zeros((answers.shape[0], 26), dtype=np.int64)
    rows = np.arange(answers.shape[0])
    for position in range(WORD_LENGTH):
        # One index per row per position, so plain fancy-index addition is exact (no duplicate targets).
        counts[rows, answers[:, position]] += ~green[:, position]
    tiles = np.where(green, 2, 0)
    for position in range(WORD_LENGTH):
        letter = guess[position]
        yellow = ~green[:, position] & (counts[:, letter] > 0)
        tiles[yellow, position] = 1
        counts[yellow, letter] -= 1
    weights = 3 ** np.arange(WORD_LENGTH - 1, -1, -1)
    codes: IntArray = tiles @ weights
    return codes


def feedback_code(pattern: str) -> int:
    code = 0
    for tile in pattern.upper():
        code = code * 3 + _TILE[tile]
    return code


@cache
def load_words() -> tuple[str, ...]:
    """The environment's own answer list (one source: the policy plays the words the game can pick)."""
    words: tuple[str, ...] = tuple(load_spec("wordle").module.default_words().answers)
    return words


class WordleEpisode:
    def __init__(self, agent: WordleAgent, rng: np.random.Generator) -> None:
        self.agent = agent
        self.rng = rng
        self.remaining = np.ones(len(agent.words), dtype=bool)
        self.history: tuple[tuple[str, int], ...] = ()
        self.guessed: list[str] = []

    def options(self) -> tuple[Sequence[str], FloatArray]:
        agent = self.agent
        consistent = np.flatnonzero(self.remaining)
        others = np.flatnonzero(~self.remaining)
        picks = _sample(self.rng, consistent, agent.consistent_candidates)
        picks += _sample(self.rng, others, agent.probe_candidates)
        words = [agent.words[i] for i in picks]
        words += [word for word in dict.fromkeys(self.guessed) if word not in words]
        features = np.array([self._features(word) for word in words], dtype=np.float64)
        return words, features

    def _features(self, word: str) -> list[float]:
        cache_key = (self.history, word)
        cached = self.agent.feature_cache.get(cache_key)
        if cached is None:
            cached = self._state_features(word)
            if len(self.agent.feature_cache) > 200_000:
                self.agent.feature_cache.clear()  # bounded memory; the hot entries (early turns) refill quickly
            self.agent.feature_cache[cache_key] = cached
        return [*cached, 1.0 if word in self.guessed else 0.0]

    def _state_features(self, word: str) -> list[float]:
        agent = self.agent
        remaining = agent.encoded[self.remaining]
        count = remaining.shape[0]
        index = agent.index.get(word)
        consistent = index is not None and bool(self.remaining[index])
        codes = feedback_codes(agent.encode_one(word), remaining)
        _, sizes = np.unique(codes, return_counts=True)
        shares = sizes / count
        entropy = float(-(shares * np.log2(shares)).sum())
        information = entropy / math.log2(count) if count > 1 else 0.0
        elimination = 1.0 - float((shares**2).sum())  # expected share ruled out
        letters = set(word)
        presence = agent.letter_presence[self.remaining]  # (count, 26) bool
        coverage = float(presence[:, [ord(ch) - 97 for ch in letters]].mean(axis=0).sum()) / WORD_LENGTH
        return [
            1.0 if consistent else 0.0,
            (1.0 / count) if consistent else 0.0,
            information,
            elimination,
            coverage,
            (WORD_LENGTH - len(letters)) / (WORD_LENGTH - 1),
        ]

    def observe(self, action: str, observation: str) -> None:
        guess = action.strip().lower()
        self.guessed.append(guess)
        code = self.agent.parse_feedback(guess, observation)
        if code is None:
            return  # an invalid guess or an unparseable reply tells the policy nothing about the answer
        self.history = (*self.history, (guess, code))
        codes = feedback_codes(self.agent.encode_one(guess), self.agent.encoded)
        self.remaining &= codes == code


class WordleAgent:
    env_id = "wordle"
    feature_names = FEATURES
    max_turns = 6

    def __init__(
        self,
        *,
        words: Sequence[str] | None = None,
        consistent_candidates: int = 12,
        probe_candidates: int = 20,
    ) -> None:
        self.words = tuple(words) if words is not None else load_words()
        if not self.words:
            raise ValueError("the wordle agent needs a non-empty word list")
        self.index = {word: i for i, word in enumerate(self.words)}
        self.encoded = encode(self.words)
        self.letter_presence = np.zeros((len(self.words), 26), dtype=bool)
        for position in range(WORD_LENGTH):
            self.letter_presence[np.arange(len(self.words)), self.encoded[:, position]] = True
        self.consistent_candidates = consistent_candidates
        self.probe_candidates = probe_candidates
        self.feature_cache: dict[tuple[tuple[tuple[str, int], ...], str], list[float]] = {}

    def encode_one(self, word: str) -> IntArray:
        row: IntArray = encode([word])[0]
        return row

    def parse_feedback(self, guess: str, observation: str) -> int | None:
        """The feedback code the environment gave ``guess`` (the last ``<guess> <GYX tiles>`` pair), or None."""
        found = [match for match in _FEEDBACK.finditer(observation) if match.group(1).lower() == guess]
        if not found:
            return None
        return feedback_code(found[-1].group(2))

    def start(self, task: Mapping[str, Any], observation: str, rng: np.random.Generator) -> WordleEpisode:
        return WordleEpisode(self, rng)


def _sample(rng: np.random.Generator, pool: IntArray, limit: int) -> list[int]:
    if pool.size <= limit:
        return [int(i) for i in pool]
    return [int(i) for i in rng.choice(pool, size=limit, replace=False)]
