"""The prompt-length lower bound and the longest prompts a report keeps (mtrl.validation.prompt_length)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mtrl.validation.prompt_length import KEPT, LongestPrompts, over_limit, prompt_text, token_lower_bound

TEXT = st.lists(st.sampled_from(["a", "bb", " ", "\n", "\t", "é", "  "]), max_size=100).map("".join)
MESSAGES = st.lists(st.fixed_dictionaries({"role": st.just("user"), "content": TEXT}), max_size=3)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(TEXT, MESSAGES), max_size=60))
def test_the_kept_prompts_are_exactly_the_longest_whatever_the_skipping(prompts: list[object]) -> None:
    kept = LongestPrompts()
    for line, prompt in enumerate(prompts, 1):
        kept.add(line, {"prompt": prompt})
    measured = sorted(
        ((token_lower_bound(prompt_text({"prompt": p})), line) for line, p in enumerate(prompts, 1)),
        key=lambda item: (-item[0], item[1]),
    )
    expected_words = [words for words, _ in measured[:KEPT]]
    assert [entry["tokens_at_least"] for entry in kept.to_list()] == expected_words


def test_words_are_the_bound_and_malformed_entries_are_skipped() -> None:
    assert token_lower_bound("  one\ttwo\nthree  ") == 3
    assert prompt_text({"prompt": [{"role": "user", "content": "hi"}]}) == '[{"role": "user", "content": "hi"}]'
    entries = [{"line": 1, "tokens_at_least": 10}, {"line": "2", "tokens_at_least": 99}, "x", {"line": 3}]
    assert over_limit(entries, 5) == [{"line": 1, "tokens_at_least": 10}]
    assert over_limit("not a list", 5) == []
