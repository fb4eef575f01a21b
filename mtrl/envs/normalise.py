"""One normalisation for tool inputs (fixture keys) and answer fields (exact match): equal after it = same value.

Rules, applied recursively:

- strings: surrounding whitespace stripped, runs of inner whitespace collapsed to one space, casefolded
  (``"  Alice   SMITH "`` → ``"alice smith"``); a string that reads as a decimal number in canonical
  form becomes that number (``"12.50"`` → ``12.5``, ``"3"`` → ``3``), except when it has a leading zero
  (``"007"`` stays a string: identifiers keep their zeros);
- numbers: integral values become ``int`` (``2.0`` → ``2``), others stay ``float``; non-finite floats
  and booleans are kept as they are (``True`` is not ``1``); integers beyond 128 bits are written in
  hexadecimal (exact, and free of Python's 4300-digit conversion limit);
- ``None`` stays ``None``; lists and tuples become lists of normalised items (order kept);
- mappings: keys normalised as strings, values recursively; the key order does not matter, because
  ``canonical_key`` writes keys sorted;
- anything else becomes its ``repr`` (so hostile values never raise).

``canonical_key`` is the compact JSON text of the normalised value with sorted keys: the lookup key of a
recorded tool response.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_LEADING_ZERO = re.compile(r"-?0[0-9]")
_SPACES = re.compile(r"\s+")
_MAX_DEPTH = 32
_MAX_EXPONENT = 30
_MAX_INT_BITS = 128
_MAX_NUMBER_CHARS = 40  # longer digit strings (card numbers, ids) stay strings: no float rounding of ids


def _number(value: float | int | Decimal) -> int | float | str:
    if isinstance(value, Decimal):
        value = int(value) if value == value.to_integral_value() else float(value)
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
        # Python refuses int <-> decimal text beyond 4300 digits; hexadecimal has no such limit and stays exact.
        return ("-0x" if value < 0 else "0x") + format(abs(value), "x")
    return value


def normalise_text(text: str) -> str | int | float:
    """A string's normal form: collapsed, stripped, casefolded; a canonical decimal number becomes a number."""
    folded = _SPACES.sub(" ", text).strip().casefold()
    if len(folded) <= _MAX_NUMBER_CHARS and _NUMBER.fullmatch(folded) and not _LEADING_ZERO.match(folded):
        try:
            number = Decimal(folded)
        except (InvalidOperation, ValueError):
            return folded
        if abs(number.adjusted()) > _MAX_EXPONENT:  # "1e999999999" would be a billion-digit int
            return folded
        return _number(number)
    return folded


def normalise(value: Any, _depth: int = 0) -> Any:  # noqa: PLR0911 - one return per kind
    """The normal form of a plain-data value (see the module docstring); never raises."""
    if _depth > _MAX_DEPTH:
        return "<too deep>"
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return normalise_text(value)
    if isinstance(value, int | float):
        return _number(value)
    if isinstance(value, list | tuple):
        return [normalise(item, _depth + 1) for item in value]
    if isinstance(value, Mapping):
        return {str(normalise_text(str(key))): normalise(item, _depth + 1) for key, item in value.items()}
    return repr(value)[:200]


def canonical_key(value: Any) -> str:
    """Compact JSON of ``normalise(value)`` with sorted keys: equal keys ⇔ equal normalised values."""
    return json.dumps(normalise(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
