"""The wordle agent's view of the game: feedback, consistency, features."""

from __future__ import annotations

import numpy as np

from environments.wordle import score_guess
from mtrl.local.agents.wordle import (
    ALL_GREEN,
    FEATURES,
    WordleAgent,
    encode,
    feedback_code,
    feedback_codes,
)


def test_vectorised_feedback_matches_the_environment() -> None:
    agent = WordleAgent()
    rng = np.random.default_rng(0)
    answers = [agent.words[i] for i in rng.choice(len(agent.words), 400, replace=False)]
    guesses = ["speed", "eerie", "llama", "abbey", "geese", *answers[:20]]
    for guess in guesses:
        codes = feedback_codes(encode([guess])[0], encode(answers))
        assert codes.tolist() == [feedback_code(score_guess(guess, answer)) for answer in answers], guess
    assert feedback_code("GGGGG") == ALL_GREEN


def test_episode_narrows_candidates_from_the_environment_observation() -> None:
    agent = WordleAgent(consistent_candidates=5, probe_candidates=3)
    episode = agent.start({"answer": "beach"}, "Guess the word", np.random.default_rng(1))
    words, features = episode.options()
    assert features.shape == (len(words), len(FEATURES))
    assert np.all((features >= 0) & (features <= 1))
    tiles = score_guess("raise", "beach")
    episode.observe("raise", f"Guess 1/6: RAISE -> {tiles}\nCurrent knowledge: ...")
    remaining = [agent.words[i] for i in np.flatnonzero(episode.remaining)]
    assert "beach" in remaining
    assert all(score_guess("raise", word) == tiles for word in remaining)
    words, features = episode.options()
    column = dict(zip(FEATURES, features.T, strict=True))
    assert "raise" in words  # an already-guessed word is offered, flagged so the policy learns to avoid it
    assert column["already_guessed"][words.index("raise")] == 1.0
    consistent_words = [w for w, c in zip(words, column["consistent"], strict=True) if c == 1.0]
    assert consistent_words
    assert all(score_guess("raise", w) == tiles for w in consistent_words)
    episode.observe("zzzzz", "Invalid guess 'zzzzz': must be ...")  # no feedback: nothing is ruled out
    assert episode.remaining.sum() == len(remaining)
