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
def feedback_table(words: tuple[str, ...]) -> NDArray[np.uint8]:
    """Feedback code of every word (as a guess) against every word (as the answer); computed once per process."""
    encoded = encode(words)
    table = np.empty((len(words), len(words)), dtype=np.uint8)  # codes are < 243
    for index in range(len(words)):
        table[index] = feedback_codes(encoded[index], encoded)
    return table


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
        self.guessed: list[int] = []  # indices into agent.words, in order

    def options(self) -> tuple[Sequence[str], FloatArray]:
        agent = self.agent
        picks = _sample(self.rng, np.flatnonzero(self.remaining), agent.consistent_candidates)
        picks += _sample(self.rng, np.flatnonzero(~self.remaining), agent.probe_candidates)
        picks += [i for i in dict.fromkeys(self.guessed) if i not in picks]
        candidates = np.array(picks, dtype=np.int64)
        return [agent.words[i] for i in picks], self._features(candidates)

    def _features(self, candidates: IntArray) -> FloatArray:
        """All candidates' features at once, from the precomputed guess × answer feedback table."""
        agent = self.agent
        remaining = np.flatnonzero(self.remaining)
        count = remaining.size
        n = candidates.size
        codes = agent.feedback[np.ix_(candidates, remaining)].astype(np.int64)  # (n, count)
        patterns = ALL_GREEN + 1
        sizes = np.bincount((codes + patterns * np.arange(n)[:, None]).ravel(), minlength=patterns * n)
        shares = sizes.reshape(n, patterns) / count
        logs = np.log2(shares, out=np.zeros_like(shares), where=shares > 0)
        entropy = -(shares * logs).sum(axis=1)
        consistent = self.remaining[candidates].astype(np.float64)
        letter_share = agent.letter_presence[remaining].mean(axis=0)  # share of remaining words with each letter
        features = np.column_stack(
            [
                consistent,
                consistent / count,
                entropy / math.log2(count) if count > 1 else np.zeros(n),
                1.0 - (shares**2).sum(axis=1),  # expected share of remaining words ruled out
                agent.letter_presence[candidates].astype(np.float64) @ letter_share / WORD_LENGTH,
                (WORD_LENGTH - agent.distinct_letters[candidates]) / (WORD_LENGTH - 1),
                np.isin(candidates, self.guessed).astype(np.float64),
            ]
        )
        return features

    def observe(self, action: str, observation: str) -> None:
        guess = action.strip().lower()
        index = self.agent.index.get(guess)
        if index is None:
            return  # not one of the offered words: nothing to learn from the reply
        self.guessed.append(index)
        code = self.agent.parse_feedback(guess, observation)
        if code is None:
            return  # an invalid guess or an unparseable reply tells the policy nothing about the answer
        self.remaining &= self.agent.feedback[index] == code


class WordleAgent:
    env_id = "wordle"
    feature_names = FEATURES
    # The environment's own limit (its MAX_TURNS, which leaves room for invalid guesses); the agent only proposes
    # valid words, so a game ends within its 6 guesses and a lost game is not a turn-limit hit.
    max_turns = int(load_spec("wordle").max_turns)

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
        self.distinct_letters = self.letter_presence.sum(axis=1)
        self.feedback = feedback_table(self.words)
        self.consistent_candidates = consistent_candidates
        self.probe_candidates = probe_candidates

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
