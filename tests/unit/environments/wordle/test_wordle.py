"""Wordle: feedback, knowledge (with the reference quirks fixed), invalid input, reward tiers, data."""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from environments.wordle import build_word_lists, game, make_sample, validate_task
from environments.wordle.game import Knowledge, WordleEnv, parse_guess, score_guess
from environments.wordle.words import DATA_DIR, default_words
from mtrl.envs import TaskError

WORDS = default_words()
ANSWERS = list(WORDS.answers)
ALLOWED = sorted(WORDS.allowed)
SMALL_ALPHABET = st.text(alphabet="abcde", min_size=5, max_size=5)


def play(answer: str, actions: list[str]) -> WordleEnv:
    env = WordleEnv()
    env.reset({"prompt": "Guess the 5-letter word", "answer": answer})
    for action in actions:
        if env.done:
            break
        env.step(action)
    return env


# --- feedback -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("guess", "answer", "expected"),
    [
        ("speed", "abide", "XXYXY"),  # only one E is yellow: the answer has one unmatched E
        ("crane", "crane", "GGGGG"),
        ("eerie", "there", "YXYXG"),  # greens first, then the one unmatched E goes to the leftmost copy
        ("llama", "hello", "YYXXX"),
        ("hello", "llama", "XXYYX"),
        ("allee", "eagle", "YYXYG"),
    ],
)
def test_feedback_examples(guess: str, answer: str, expected: str) -> None:
    assert score_guess(guess, answer) == expected


@given(guess=SMALL_ALPHABET, answer=SMALL_ALPHABET)
def test_feedback_matches_the_counting_definition(guess: str, answer: str) -> None:
    marks = score_guess(guess, answer)
    assert all((marks[i] == "G") == (guess[i] == answer[i]) for i in range(5))
    for letter in set(guess):
        shown = sum(1 for i in range(5) if guess[i] == letter and marks[i] in "GY")
        assert shown == min(guess.count(letter), answer.count(letter))
        # Yellow copies are the leftmost non-green ones.
        non_green = [i for i in range(5) if guess[i] == letter and marks[i] != "G"]
        yellows = [i for i in non_green if marks[i] == "Y"]
        assert yellows == non_green[: len(yellows)]


# --- knowledge ------------------------------------------------------------------------------------------


def test_green_copy_keeps_the_minimum_count() -> None:
    knowledge = Knowledge()
    knowledge.update("geese", score_guess("geese", "sheep"))  # XYGYY: E green, another E yellow
    assert knowledge.min_count["e"] == 2  # the reference dropped this once one E was green
    assert not knowledge.consistent("sheds")  # one E only: must be ruled out
    assert knowledge.consistent("sheep")


def test_gray_copy_caps_the_count() -> None:
    knowledge = Knowledge()
    knowledge.update("speed", score_guess("speed", "abide"))  # second E gray: exactly one E
    assert knowledge.max_count["e"] == 1
    assert knowledge.max_count["s"] == 0
    assert not knowledge.consistent("eerie")
    assert knowledge.consistent("abide")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answer=st.sampled_from(ANSWERS), guesses=st.lists(st.sampled_from(ALLOWED), min_size=1, max_size=4))
def test_candidate_masks_equal_the_brute_force_filter(answer: str, guesses: list[str]) -> None:
    env = WordleEnv(verbose=False)
    env.reset({"prompt": "", "answer": answer})
    for guess in guesses:
        if env.done:
            break
        env.step(guess)
    played = [g for g in env.guesses if g != answer]
    by_feedback = [w for w in ANSWERS if all(score_guess(g, w) == score_guess(g, answer) for g in played)]
    by_knowledge = [w for w in ANSWERS if env.knowledge.consistent(w)]
    assert answer in by_feedback
    if not env.solved:
        assert env.candidate_words() == by_feedback == by_knowledge


# --- actions --------------------------------------------------------------------------------------------


def test_invalid_input_does_not_consume_a_guess() -> None:
    env = play("beach", ["hi", "c r a n e", "12345", "xyzzq"])
    assert env.guesses == []
    assert env.invalid_actions == 4
    assert not env.done
    assert env.result().reward == game.NO_PLAY_REWARD  # nothing valid was ever played


def test_too_many_invalid_actions_end_the_game() -> None:
    env = play("beach", ["nope!"] * game.MAX_ACTIONS)
    assert env.done
    assert env.result().reward == game.NO_PLAY_REWARD


def test_repeated_guess_consumes_a_guess_and_costs() -> None:
    once = play("beach", ["raise", "cloth"])
    twice = play("beach", ["raise", "raise"])
    assert len(twice.guesses) == 2
    assert twice.repeated_guesses == 1
    assert twice.result().reward < once.result().reward


def test_text_recovery_costs_only_when_the_guess_is_accepted() -> None:
    assert parse_guess('guess_word("Crane")') == ("crane", True, "Crane")
    assert parse_guess('{"guess": "slate"}')[:2] == ("slate", True)
    assert parse_guess("  CRANE. ")[:2] == ("crane", False)
    clean = play("beach", ["raise"])
    recovered = play("beach", ["<guess>raise</guess>"])
    assert clean.points - recovered.points == game.TEXT_FORMAT_PENALTY
    rejected = play("beach", ['guess_word("zzzzz")'])
    assert rejected.points == -game.NOT_A_WORD_PENALTY  # no extra text penalty for a rejected word
    assert rejected.recovered_from_text == 0


def test_clue_violations_lower_the_reward() -> None:
    # Answer BEACH; after RAISE: A and E present (not at 2 and 5), R, I, S gray.
    respectful = play("beach", ["raise", "cheap"])
    ignoring = play("beach", ["raise", "rinse"])  # reuses gray R, I, S and drops the known A
    assert ignoring.clue_violations > 0
    assert respectful.clue_violations == 0
    assert ignoring.points < respectful.points


def test_good_opener_beats_a_bad_one() -> None:
    good = play("beach", ["raise"])
    bad = play("beach", ["fuzzy"])
    assert good.result().reward > bad.result().reward


def test_stopping_early_costs_per_unused_guess() -> None:
    env = play("beach", ["raise"])
    assert env.shaping_points() == env.points - 5 * game.ABANDON_PENALTY_PER_GUESS


def test_observation_reports_feedback_and_knowledge() -> None:
    env = WordleEnv()
    env.reset({"prompt": "Guess the 5-letter word", "answer": "beach"})
    step = env.step("speed")
    assert step.observation.startswith("Guess 1/6: SPEED -> XXYXX")
    assert "Exact letter counts: E=1" in step.observation
    assert "Not in the word (gray): D, P, S" in step.observation
    final = env.step("beach")
    assert final.done
    assert "solved it in 2" in final.observation
    assert env.step("beach").observation == "Game over: you already solved it."


# --- reward tiers ---------------------------------------------------------------------------------------

ACTIONS = st.one_of(
    st.sampled_from(ALLOWED),
    st.sampled_from(ANSWERS),
    st.text(min_size=0, max_size=8),
    st.text(alphabet="qxzjv", min_size=5, max_size=5),
    st.sampled_from(ALLOWED).map(lambda w: f'guess_word("{w}")'),
)


@st.composite
def games(draw: st.DrawFn) -> WordleEnv:
    answer = draw(st.sampled_from(ANSWERS))
    actions = draw(st.lists(ACTIONS, max_size=14))
    if draw(st.booleans()):  # make solves common: put the answer somewhere in the sequence
        actions.insert(draw(st.integers(0, len(actions))), answer)
    return play(answer, actions)


def tier(env: WordleEnv) -> tuple[float, float]:
    """Closed reward interval the outcome alone guarantees."""
    if not env.guesses:
        return game.NO_PLAY_REWARD, game.NO_PLAY_REWARD
    if env.solved:
        base = game.SOLVE_BASE_REWARD + game.SOLVE_SPEED_BONUS * (6 - len(env.guesses)) / 5
        return base - game.SOLVE_SHAPING_WEIGHT, base + game.SOLVE_SHAPING_WEIGHT
    return game.LOSS_REWARD - game.LOSS_SHAPING_WEIGHT, game.LOSS_REWARD + game.LOSS_SHAPING_WEIGHT


def rank(env: WordleEnv) -> int:
    """Higher is better: solve on guess 1 = 6 ... solve on guess 6 = 1, loss = 0, no play = -1."""
    if not env.guesses:
        return -1
    return 7 - len(env.guesses) if env.solved else 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=games(), second=games())
def test_tiers_order_every_pair_of_games(first: WordleEnv, second: WordleEnv) -> None:
    for env in (first, second):
        low, high = tier(env)
        reward = env.result().reward
        assert math.isfinite(reward)
        assert low - 1e-12 <= reward <= high + 1e-12
        assert reward == pytest.approx(sum(env.result().components.values()))
    if rank(first) > rank(second):
        assert first.result().reward > second.result().reward
    elif rank(second) > rank(first):
        assert second.result().reward > first.result().reward


@pytest.mark.parametrize("points", [-1e9, 1e9])
def test_tiers_hold_at_both_shaping_extremes(points: float) -> None:
    def forced(n: int, solved: bool, extreme: float) -> float:
        env = WordleEnv()
        env.reset({"prompt": "", "answer": "beach"})
        env.guesses = ["raise"] * n
        env.solved = solved
        env.points = extreme
        return env.result().reward

    solves = [(forced(n, True, -abs(points)), forced(n, True, abs(points))) for n in range(1, 7)]
    for (low_faster, _), (_, high_slower) in itertools.pairwise(solves):
        assert low_faster > high_slower
    worst_solve = solves[-1][0]
    best_loss = forced(6, False, abs(points))
    worst_loss = forced(1, False, -abs(points))
    assert worst_solve > 1.0 > best_loss
    assert best_loss < 0
    assert worst_loss > game.NO_PLAY_REWARD


# --- task rows and data ---------------------------------------------------------------------------------


def test_validate_task() -> None:
    assert validate_task({"prompt": "Guess", "answer": "BEACH"}) == []
    assert validate_task({"prompt": "Guess", "answer": "beache"}) == [
        "'answer' must be exactly 5 letters a-z (got 'beache')"
    ]
    assert validate_task({"prompt": "Guess", "answer": "zzzzz"}) == [
        "'answer' 'zzzzz' is not in the wordle answer list"
    ]
    assert validate_task({"answer": 5}) == [
        "'answer' must be a string (got int)",
        "'prompt' must be a string or a list of messages (got NoneType)",
    ]
    with pytest.raises(TaskError, match="not in the wordle answer list"):
        WordleEnv().reset({"prompt": "", "answer": "zzzzz"})


def test_word_lists_are_consistent() -> None:
    assert len(WORDS.answers) > 1500
    assert len(WORDS.allowed) > 10000
    assert set(WORDS.answers) <= WORDS.allowed
    assert set(WORDS.entropy) == WORDS.allowed
    excluded = {
        line.strip()
        for line in (DATA_DIR / "excluded_answers.txt").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert excluded
    assert not excluded & WORDS.allowed
    assert (DATA_DIR / "LICENSE-SCOWL.txt").read_text(encoding="utf-8").count("Kevin Atkinson") > 0


DICT_DIR = Path("/usr/share/dict")


@pytest.mark.skipif(
    not all((DICT_DIR / name).exists() for name in build_word_lists.SOURCES),
    reason="apt-get install wamerican-small wamerican-huge to check the word lists rebuild identically",
)
def test_word_lists_rebuild_identically_from_the_debian_packages() -> None:
    outputs = build_word_lists.build(DICT_DIR, with_entropy=False)
    for name, text in outputs.items():
        assert (DATA_DIR / name).read_text(encoding="utf-8") == text, f"{name} differs from a fresh build"


@pytest.mark.parametrize("word", ["raise", "fuzzy"])
def test_shipped_entropy_matches_the_feedback_distribution(word: str) -> None:
    patterns = Counter(score_guess(word, answer) for answer in ANSWERS)
    total = len(ANSWERS)
    expected = -sum(n / total * math.log2(n / total) for n in patterns.values())
    assert WORDS.entropy[word] == pytest.approx(expected, abs=1e-4)
    assert WORDS.entropy["raise"] > 5.5 > WORDS.entropy["fuzzy"]


def test_sample_dataset_is_reproducible_valid_and_disjoint() -> None:
    sample_dir = Path(make_sample.__file__).parent / "sample"
    for name, text in make_sample.sample_files().items():
        assert (sample_dir / name).read_text(encoding="utf-8") == text, f"{name} is stale: run make_sample.py"
    rows = {
        split: [json.loads(line) for line in (sample_dir / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()]
        for split in ("train", "eval")
    }
    assert (len(rows["train"]), len(rows["eval"])) == (200, 50)
    answers = {split: {row["metadata"]["answer"] for row in split_rows} for split, split_rows in rows.items()}
    assert not answers["train"] & answers["eval"]
    assert all(validate_task(row["metadata"]) == [] for split_rows in rows.values() for row in split_rows)
