"""Wordle environment + reward throughput with a scripted policy (target ≥ 5,000 steps/s per core).

The policy plays the alphabetically first answer still consistent with the feedback, so games are real
(solves in 2–6 guesses, occasional losses); every step builds the full observation text and every episode
is scored with ``result()``. Single process, so the figure is per core.
"""

from __future__ import annotations

import time

from environments.wordle.game import WordleEnv
from environments.wordle.words import default_words

TARGET_STEPS_PER_S = 5000
DURATION_S = 2.0


def play_for(duration_s: float, *, verbose: bool) -> tuple[int, int, int]:
    words = default_words()
    env = WordleEnv(words, verbose=verbose)
    steps = episodes = solved = 0
    deadline = time.perf_counter() + duration_s
    index = 0
    while time.perf_counter() < deadline:
        answer = words.answers[index % len(words.answers)]
        index += 7919  # stride through the list so consecutive games differ
        env.reset({"prompt": "Guess the 5-letter word", "answer": answer})
        guess = "raise"
        while not env.done:
            env.step(guess)
            steps += 1
            guess = words.first_in(env.candidates) or "raise"
        result = env.result()
        episodes += 1
        solved += result.success
    return steps, episodes, solved


def main() -> None:
    play_for(0.2, verbose=True)  # warm the word index and caches
    for verbose in (True, False):
        started = time.perf_counter()
        steps, episodes, solved = play_for(DURATION_S, verbose=verbose)
        elapsed = time.perf_counter() - started
        rate = steps / elapsed
        label = "full observations" if verbose else "feedback only"
        verdict = "OK" if rate >= TARGET_STEPS_PER_S else "BELOW TARGET"
        print(
            f"   wordle ({label}): {rate:,.0f} steps/s/core (target ≥ {TARGET_STEPS_PER_S:,}) {verdict}; "
            f"{episodes:,} episodes, {solved / episodes:.1%} solved, {steps / episodes:.2f} guesses/episode"
        )


if __name__ == "__main__":
    main()
