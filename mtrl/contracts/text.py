"""Wording shared by every message mtrl prints: counts with their noun in the right number."""

from __future__ import annotations


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``1 step``, ``2 steps``, ``0 steps`` (``plural_form`` for nouns that do not take an s, e.g. ``"entries"``)."""
    return f"{count} {noun if count == 1 else plural_form or noun + 's'}"
