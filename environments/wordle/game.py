"""Wordle: feedback, clue knowledge, the shaping score and the tiered reward. No dependencies.

Reward (constants below): solved on guess n → 1.05 + 0.5·(6−n)/5 + 0.04·s; not solved → −0.5 + 0.15·s;
no valid guess → −1.5, where s = clip(shaping points / 150, −1, 1). Adjacent solve tiers are 0.1 apart
and shaping moves a solve by at most ±0.04, so a faster solve always beats a slower one, any solve beats
any loss (≥ 1.01 vs ≤ −0.35) and any loss beats no play (≥ −0.65 vs −1.5).

Differences from the reference sample (its quirks, fixed here):
- Knowledge keeps a letter's minimum count when one copy turns green (e.g. green E + yellow E means
  "at least two E"), and a gray mark caps the letter's count ("exactly one E" when a second E is gray).
- An invalid action (malformed, or a 5-letter string that is not in the word list) never consumes a guess;
  only a repeated *valid* word does (penalised).
- Stopping early is scored below six honest failed guesses (a penalty per unused guess, still in the loss
  tier), so giving up is not a free exit.
- The text-recovery penalty applies only when the recovered guess was actually accepted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from environments.wordle.words import ALPHABET, WORD_LENGTH, WordData, default_words
from mtrl.contracts.environment import MALFORMED_ACTIONS, EpisodeResult, StepResult, TaskError

MAX_GUESSES = 6
MAX_ACTIONS = 12  # valid or not; stops a policy that never produces a usable guess

SOLVE_BASE_REWARD = 1.05
SOLVE_SPEED_BONUS = 0.5
SOLVE_SHAPING_WEIGHT = 0.04
LOSS_REWARD = -0.5
LOSS_SHAPING_WEIGHT = 0.15
NO_PLAY_REWARD = -1.5
SHAPING_SCALE = 150.0

# Shaping points (the reference's scale; summed per game, then normalised by SHAPING_SCALE and clipped).
VALID_GUESS_BASE = 15.0
ENTROPY_COEFF = 7.5
NEW_LETTER_BONUS = 2.0
POSSIBILITY_REDUCTION_BONUS = 15.0
TIME_PENALTY = 1.0
GRAY_VIOLATION = 20.0  # a letter used more often than its known maximum (0 for a gray letter)
YELLOW_VIOLATION = 20.0  # a known letter used fewer times than its known minimum
GREEN_VIOLATION = 30.0  # a known green position not kept
MISPLACED_VIOLATION = 10.0  # a present letter put back where it is known not to be
GREEN_REUSE_PENALTY = 3.0
YELLOW_REUSE_PENALTY = 1.5
REPETITION_PENALTY = 40.0
NOT_A_WORD_PENALTY = 35.0
MALFORMED_PENALTY = 50.0
TEXT_FORMAT_PENALTY = 5.0
ABANDON_PENALTY_PER_GUESS = 10.0

DEFAULT_PROMPT = "Guess the 5-letter word"
_CLEAN = re.compile(r"^[A-Za-z]{5}$")
# Tool-call formats policies drift into; a guess recovered from them costs TEXT_FORMAT_PENALTY.
_RECOVERY = (
    re.compile(r"guess_word\s*\(\s*(?:word\s*=\s*)?[\"']?([A-Za-z]+)[\"']?\s*\)"),
    re.compile(r"\"(?:guess|word)\"\s*:\s*\"([A-Za-z]+)\""),
    re.compile(r"__parameter=guess>\s*([A-Za-z]+)\s*<"),
    re.compile(r"<guess>\s*([A-Za-z]+)\s*</guess>"),
    re.compile(r"\bguess\s*[=:]\s*[\"']?([A-Za-z]+)\b"),
)


def score_guess(guess: str, answer: str) -> str:
    """Feedback marks: G right letter right place, Y in the word elsewhere, X not (more) in the word.

    Duplicates: greens first; then each remaining guessed copy turns Y, left to right, only while the
    answer still has an unmatched copy of that letter.
    """
    if guess == answer:
        return "G" * len(answer)
    marks = ["X"] * len(guess)
    unmatched: list[str] = []
    for i, (g, a) in enumerate(zip(guess, answer, strict=True)):
        if g == a:
            marks[i] = "G"
        else:
            unmatched.append(a)
    for i, g in enumerate(guess):
        if marks[i] == "X" and g in unmatched:
            marks[i] = "Y"
            unmatched.remove(g)
    return "".join(marks)


def parse_guess(action: str) -> tuple[str | None, bool, str]:
    """(word or None, recovered-from-text?, what to echo back). Never raises."""
    text = action.strip().strip("\"'`*.!").strip()
    if _CLEAN.match(text):
        return text.lower(), False, text
    for pattern in _RECOVERY:
        found = pattern.search(action)
        if found:
            word = found.group(1)
            return (word.lower(), True, word) if len(word) == WORD_LENGTH else (None, True, word)
    shown = text if len(text) <= 40 else text[:37] + "..."
    return None, False, shown.encode("utf-8", "replace").decode("utf-8")  # a lone surrogate is echoed as "?"


@dataclass
class Violations:
    green_missed: int = 0
    yellow_short: int = 0
    over_cap: int = 0
    misplaced: int = 0
    greens_kept: int = 0
    yellows_reused: int = 0

    @property
    def total(self) -> int:
        return self.green_missed + self.yellow_short + self.over_cap + self.misplaced


@dataclass
class Knowledge:
    """What the feedback so far proves about the answer."""

    green: dict[int, str] = field(default_factory=dict)
    not_at: dict[str, set[int]] = field(default_factory=dict)
    min_count: dict[str, int] = field(default_factory=dict)
    max_count: dict[str, int] = field(default_factory=dict)

    def update(self, guess: str, feedback: str) -> None:
        present: dict[str, int] = {}
        capped: set[str] = set()
        for position, (letter, mark) in enumerate(zip(guess, feedback, strict=True)):
            if mark == "G":
                self.green[position] = letter
            else:
                self.not_at.setdefault(letter, set()).add(position)
            if mark == "X":
                capped.add(letter)
            else:
                present[letter] = present.get(letter, 0) + 1
        for letter in set(guess):
            seen = present.get(letter, 0)
            if seen > self.min_count.get(letter, 0):
                self.min_count[letter] = seen
            if letter in capped:
                # A gray copy means the answer has exactly as many as were marked G or Y.
                self.max_count[letter] = min(seen, self.max_count.get(letter, WORD_LENGTH))

    def consistent(self, word: str) -> bool:
        """True when ``word`` could still be the answer (used by tests as the slow reference)."""
        if any(word[p] != letter for p, letter in self.green.items()):
            return False
        if any(p < len(word) and word[p] == letter for letter, ps in self.not_at.items() for p in ps):
            return False
        if any(word.count(letter) < n for letter, n in self.min_count.items()):
            return False
        return all(word.count(letter) <= n for letter, n in self.max_count.items())

    def violations(self, guess: str) -> Violations:
        """How ``guess`` ignores what is already known (judged before its own feedback)."""
        found = Violations()
        missed_green: dict[str, int] = {}
        for position, letter in self.green.items():
            if guess[position] == letter:
                found.greens_kept += 1
            else:
                found.green_missed += 1
                missed_green[letter] = missed_green.get(letter, 0) + 1
        green_copies: dict[str, int] = {}
        for letter in self.green.values():
            green_copies[letter] = green_copies.get(letter, 0) + 1
        for letter, needed in self.min_count.items():
            # A missed green copy is already penalised as green_missed; count only the copies beyond it.
            if guess.count(letter) < needed - missed_green.get(letter, 0):
                found.yellow_short += 1
        for letter in set(guess):
            count = guess.count(letter)
            if count > self.max_count.get(letter, WORD_LENGTH):
                found.over_cap += 1
            if self.min_count.get(letter, 0) > green_copies.get(letter, 0):
                found.yellows_reused += 1
        for position, letter in enumerate(guess):
            if self.max_count.get(letter, 1) > 0 and position in self.not_at.get(letter, ()):
                found.misplaced += 1
        return found

    def summary(self, guessed: list[str], remaining: int) -> str:
        pattern = " ".join(self.green.get(p, "_").upper() for p in range(WORD_LENGTH))
        green_copies = list(self.green.values())
        unplaced, exact = [], []
        for letter in sorted(self.min_count):
            minimum = self.min_count[letter]
            if minimum > green_copies.count(letter):
                places = sorted(p + 1 for p in self.not_at.get(letter, ()))
                where = f", not at {'/'.join(map(str, places))}" if places else ""
                unplaced.append(f"{letter.upper()} (at least {minimum}{where})")
            if minimum and self.max_count.get(letter) == minimum:
                exact.append(f"{letter.upper()}={minimum}")
        gray = sorted(letter.upper() for letter, n in self.max_count.items() if n == 0)
        lines = [
            "Current knowledge:",
            f"- Correct position (green): {pattern}",
            f"- In the word, position unknown (yellow): {'; '.join(unplaced) if unplaced else 'none'}",
            f"- Not in the word (gray): {', '.join(gray) if gray else 'none'}",
        ]
        if exact:
            lines.append(f"- Exact letter counts: {', '.join(exact)}")
        lines += [
            f"- Words already guessed: {', '.join(w.upper() for w in guessed)}",
            f"- Guesses remaining: {remaining}",
        ]
        return "\n".join(lines)


def validate_answer(answer: Any, words: WordData) -> list[str]:
    if not isinstance(answer, str):
        return [f"'answer' must be a string (got {type(answer).__name__})"]
    word = answer.strip().lower()
    if word in words.answer_set:  # the common case first: every listed answer is 5 letters a-z (WordData.build)
        return []
    if len(word) != WORD_LENGTH or not set(word) <= set(ALPHABET):
        return [f"'answer' must be exactly {WORD_LENGTH} letters a-z (got {answer!r})"]
    return [f"'answer' {answer!r} is not in the wordle answer list"]


class WordleEnv:
    """One Wordle episode. ``step`` takes a guess (a bare word or a recognisable tool-call text)."""

    def __init__(self, words: WordData | None = None, *, verbose: bool = True) -> None:
        self.words = words or default_words()
        self.verbose = verbose  # False skips the knowledge summary (faster; for benchmarks and search)
        self._reset_state("")

    def _reset_state(self, answer: str) -> None:
        self.answer = answer
        self.knowledge = Knowledge()
        self.guesses: list[str] = []
        self.feedback: list[str] = []
        self.points = 0.0
        self.actions = 0
        self.invalid_actions = 0
        self.repeated_guesses = 0
        self.recovered_from_text = 0
        self.clue_violations = 0
        self.solved = False
        self._done = False
        self._letters_seen: set[str] = set()
        self.candidates = self.words.all_answers

    @property
    def done(self) -> bool:
        return self._done

    def reset(self, task: Mapping[str, Any]) -> str:
        problems = validate_answer(task.get("answer"), self.words)
        if problems:
            raise TaskError("; ".join(problems))
        self._reset_state(str(task["answer"]).strip().lower())
        prompt = task.get("prompt")
        intro = prompt if isinstance(prompt, str) and prompt.strip() else DEFAULT_PROMPT
        return (
            f"{intro}. You have {MAX_GUESSES} guesses. Reply with one 5-letter English word per turn. "
            "Feedback per letter: G = right letter, right place; Y = in the word, elsewhere; "
            "X = not in the word (or no more copies)."
        )

    def step(self, action: str) -> StepResult:
        if self._done:
            return StepResult(self._over_message(), True)
        self.actions += 1
        word, recovered, shown = parse_guess(action if isinstance(action, str) else "")  # not text: malformed
        if word is None:
            self.points -= MALFORMED_PENALTY
            self.invalid_actions += 1
            observation = (
                f"Invalid guess '{shown}': must be exactly 5 letters (a-z only). "
                "This did not use up a guess. Try again."
            )
        elif word not in self.words.allowed:
            self.points -= NOT_A_WORD_PENALTY
            self.invalid_actions += 1
            observation = f"'{word.upper()}' is not in the word list. This did not use up a guess. Try again."
        else:
            if recovered:
                self.recovered_from_text += 1
                self.points -= TEXT_FORMAT_PENALTY
            observation = self._play(word)
        if not self._done and self.actions >= MAX_ACTIONS:
            self._done = True
            observation += f"\nGame over: {MAX_ACTIONS} actions used. The word was '{self.answer.upper()}'."
        return StepResult(observation, self._done)

    def _play(self, word: str) -> str:
        first = not self.guesses
        n = len(self.guesses) + 1
        feedback = score_guess(word, self.answer)
        self.guesses.append(word)
        self.feedback.append(feedback)
        header = f"Guess {n}/{MAX_GUESSES}: {word.upper()} -> {feedback}"
        if word == self.answer:
            self.points -= TIME_PENALTY  # the solve itself is rewarded by the outcome term
            self.solved = self._done = True
            return f"{header}\nAll green. Correct, you solved it in {n}!"
        if word in self.guesses[:-1]:
            self.repeated_guesses += 1
            self.points -= REPETITION_PENALTY + TIME_PENALTY
            message = f"{header}\nYou already guessed {word.upper()} (repetition penalty)."
        else:
            self.points += self._guess_points(word, first)
            self.knowledge.update(word, feedback)
            message = header
        if len(self.guesses) >= MAX_GUESSES:
            self._done = True
            return f"{message}\nOut of guesses: the word was '{self.answer.upper()}'."
        if self.verbose:
            message += "\n" + self.knowledge.summary(self.guesses, MAX_GUESSES - len(self.guesses))
        return message

    def _guess_points(self, word: str, first: bool) -> float:
        found = self.knowledge.violations(word)
        self.clue_violations += found.total
        points = (
            VALID_GUESS_BASE
            - GREEN_VIOLATION * found.green_missed
            - YELLOW_VIOLATION * found.yellow_short
            - GRAY_VIOLATION * found.over_cap
            - MISPLACED_VIOLATION * found.misplaced
            - GREEN_REUSE_PENALTY * found.greens_kept
            - YELLOW_REUSE_PENALTY * found.yellows_reused
            - TIME_PENALTY
        )
        letters = set(word)
        if first:
            points += ENTROPY_COEFF * self.words.entropy.get(word, 0.0)
        else:
            points += NEW_LETTER_BONUS * len(letters - self._letters_seen)
        self._letters_seen |= letters
        before = self.candidates.bit_count()
        self.candidates &= self._feedback_mask(word, score_guess(word, self.answer))
        if not first and before:
            points += POSSIBILITY_REDUCTION_BONUS * (before - self.candidates.bit_count()) / before
        return points

    def _feedback_mask(self, word: str, feedback: str) -> int:
        """Answers that would give exactly this feedback to this guess."""
        mask = self.words.all_answers
        present: dict[str, int] = {}
        gray: set[str] = set()
        for position, (letter, mark) in enumerate(zip(word, feedback, strict=True)):
            if mark == "G":
                mask &= self.words.at[position][letter]
            else:
                mask &= ~self.words.at[position][letter]
            if mark == "X":
                gray.add(letter)
            else:
                present[letter] = present.get(letter, 0) + 1
        for letter in set(word):
            n = present.get(letter, 0)
            counts = self.words.count_at_least[letter]
            mask &= counts[n]
            if letter in gray:
                mask &= ~counts[n + 1]
        return mask

    def _over_message(self) -> str:
        if self.solved:
            return "Game over: you already solved it."
        return "Game over. Stop guessing."

    def candidate_words(self) -> list[str]:
        return self.words.words_in(self.candidates)

    def shaping_points(self) -> float:
        """Accumulated points, including the penalty for guesses left unused in an unsolved game."""
        if self.solved:
            return self.points
        return self.points - ABANDON_PENALTY_PER_GUESS * (MAX_GUESSES - len(self.guesses))

    def result(self) -> EpisodeResult:
        if not self.guesses:
            outcome, shaping = NO_PLAY_REWARD, 0.0
        else:
            normalised = max(-1.0, min(1.0, self.shaping_points() / SHAPING_SCALE))
            if self.solved:
                n = len(self.guesses)
                outcome = SOLVE_BASE_REWARD + SOLVE_SPEED_BONUS * (MAX_GUESSES - n) / (MAX_GUESSES - 1)
                shaping = SOLVE_SHAPING_WEIGHT * normalised
            else:
                outcome, shaping = LOSS_REWARD, LOSS_SHAPING_WEIGHT * normalised
        return EpisodeResult(
            reward=outcome + shaping,
            components={"outcome": outcome, "shaping": shaping},
            metrics={
                "guesses": float(len(self.guesses)),
                "invalid_actions": float(self.invalid_actions),
                # mtrl's malformed-action convention (training health): a guess that is not a word counts too,
                # since it is as unusable to the game as an unparsable one.
                MALFORMED_ACTIONS: float(self.invalid_actions),
                "repeated_guesses": float(self.repeated_guesses),
                "clue_violations": float(self.clue_violations),
                "recovered_from_text": float(self.recovered_from_text),
                "candidates_left": float(self.candidates.bit_count()),
            },
            success=self.solved,
            evaluation=1.0 if self.solved else 0.0,
        )
