"""A compact open-addressing hash table of 64-bit keys → 32-bit values (line numbers).

Dataset validation must remember every id (and, for overlap checks, every task) of a file that may hold
millions of rows. A Python ``set`` of strings costs ~100 bytes per entry; this table costs 12 bytes per
slot with at most half the slots used, so 2 million rows take ~48 MB. Keys are 64-bit string hashes:
two different strings share one with probability ~n²/2⁶⁵ (about 1 in 10⁷ for a million rows).
"""

from __future__ import annotations

import json
from array import array
from typing import Any

_EMPTY = 0
MAX_VALUE = 2**31 - 1  # values are 32-bit (line numbers, tagged line numbers)


def _table(slots: int) -> tuple[array[int], array[int]]:
    # Repetition builds the arrays in place (array(typecode, bytes(n)) would briefly hold a second copy).
    return array("q", [_EMPTY]) * slots, array("i", [0]) * slots


class HashIndex:
    __slots__ = ("_keys", "_mask", "_size", "_values")

    def __init__(self, capacity: int = 1024) -> None:
        slots = 1
        while slots < capacity * 2:
            slots <<= 1
        self._mask = slots - 1
        self._keys, self._values = _table(slots)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @staticmethod
    def key_of(text: str) -> int:
        key = hash(text)
        return key if key != _EMPTY else 1

    @staticmethod
    def key_of_task(prompt: Any, answer: Any) -> int:
        """Key of a task (prompt + answer); message lists of plain strings hash without serialising."""
        if type(prompt) is list:
            try:
                prompt = tuple((m.get("role"), m.get("content")) for m in prompt)
                key = hash((prompt, answer))
            except (TypeError, AttributeError):  # unhashable content parts: fall back to canonical JSON
                key = hash((json.dumps(prompt, sort_keys=True, default=str), answer))
        else:
            key = hash((prompt, answer))
        return key if key != _EMPTY else 1

    def reserve(self, capacity: int) -> None:
        """Make room for ``capacity`` keys at once (growing one doubling at a time re-inserts every key each time)."""
        slots = self._mask + 1
        while slots < capacity * 2:
            slots <<= 1
        if slots > self._mask + 1:
            self._grow(slots)

    def get(self, key: int) -> int | None:
        keys, mask = self._keys, self._mask
        slot = key & mask
        while True:
            found = keys[slot]
            if found == key:
                return self._values[slot]
            if found == _EMPTY:
                return None
            slot = (slot + 1) & mask

    def setdefault(self, key: int, value: int) -> int | None:
        """Insert ``key → value`` unless present; returns the existing value, or None when inserted."""
        keys, mask = self._keys, self._mask
        slot = key & mask
        while True:
            found = keys[slot]
            if found == key:
                return self._values[slot]
            if found == _EMPTY:
                keys[slot] = key
                self._values[slot] = value
                self._size += 1
                if self._size * 2 > mask:
                    self._grow()
                return None
            slot = (slot + 1) & mask

    def _grow(self, slots: int = 0) -> None:
        """Re-insert every key into ``slots`` slots (a power of two; twice as many as now by default)."""
        old_keys, old_values = self._keys, self._values
        slots = slots or (self._mask + 1) * 2
        self._mask = slots - 1
        self._keys, self._values = _table(slots)
        keys, values, mask = self._keys, self._values, self._mask
        for index, key in enumerate(old_keys):
            if key != _EMPTY:
                slot = key & mask
                while keys[slot] != _EMPTY:
                    slot = (slot + 1) & mask
                keys[slot] = key
                values[slot] = old_values[index]
