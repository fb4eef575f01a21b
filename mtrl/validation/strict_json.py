"""Strict JSON for untrusted documents (datasets, manifests): what ``json.loads`` lets through and must not.

``json.loads`` accepts ``NaN``/``Infinity``, turns ``1e999`` into ``inf``, keeps the last of two equal keys
(hiding the first value), returns strings holding lone surrogates (``"\\ud800"``, which cannot be encoded as
UTF-8 later) and raises ``RecursionError`` on deep nesting. RFC 8259 §4 says names "SHOULD be unique" and
I-JSON (RFC 7493 §2.1-2.3) forbids duplicate names, lone surrogates and numbers beyond IEEE 754 double
precision, so each of these is an error here, with the line and column where it can be located.

``loads_strict`` checks everything on every object (for small documents such as manifests); the dataset
validator uses the same hooks with cheap pre-checks, so a large file is not slowed down (see
``mtrl.validation.dataset``).
"""

from __future__ import annotations

import json
import re
from typing import Any

# Nesting a manifest or a dataset row may have: far below the parser's recursion limit, and DynamoDB keeps
# at most 32 levels in a run record (settings sit two levels down).
MAX_MANIFEST_DEPTH = 16
MAX_ROW_DEPTH = 64

_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
# A JSON string escape of a surrogate: high (D800-DBFF) or low (DC00-DFFF), after an even number of backslashes.
_HIGH = r"\\u[dD][89abAB][0-9a-fA-F]{2}"
_LOW = r"\\u[dD][c-fC-F][0-9a-fA-F]{2}"
_LONE_SURROGATE = re.compile(rf"(?<!\\)(?:\\\\)*(?:{_HIGH}(?!{_LOW})|(?<!{_HIGH}){_LOW})")


class StrictJSONError(ValueError):
    """Not acceptable JSON; ``line``/``column`` (1-based) locate the problem when it can be located."""

    def __init__(self, reason: str, line: int | None = None, column: int | None = None) -> None:
        self.reason, self.line, self.column = reason, line, column
        where = f"line {line}" + (f" column {column}" if column else "") + ": " if line else ""
        super().__init__(where + reason)


class DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"duplicate key {key!r} (each key may appear once per object)")


class NonFiniteNumberError(ValueError):
    def __init__(self, literal: str) -> None:
        self.literal = literal
        super().__init__(f"{literal[:40]} is not a finite number (NaN, Infinity and overflowing numbers are refused)")


def reject_constant(name: str) -> Any:
    """``parse_constant`` hook: ``NaN``, ``Infinity`` and ``-Infinity`` are not JSON."""
    raise NonFiniteNumberError(name)


def finite_float(literal: str) -> float:
    """``parse_float`` hook (called for numbers with a fraction or exponent only): ``1e999`` would be inf."""
    value = float(literal)
    if value - value != 0.0:  # inf - inf is nan; for every finite value it is 0
        raise NonFiniteNumberError(literal)
    return value


def unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` refusing duplicate keys (slow in CPython: only for small documents or re-parses)."""
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return result


# Datasets: the default object handling (fast) with the number checks; manifests and re-parses: every check.
FAST_DECODER = json.JSONDecoder(parse_constant=reject_constant, parse_float=finite_float)
STRICT_DECODER = json.JSONDecoder(
    parse_constant=reject_constant, parse_float=finite_float, object_pairs_hook=unique_pairs
)


def keys_and_depth(value: Any) -> tuple[int, int]:
    """(keys of every object, nesting depth) of a parsed value (a scalar's depth is 0, ``[]``'s 1), without
    recursion: the one walk behind the depth limit here and the dataset parser's key count (``row_parser``)."""
    keys = deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if type(item) is dict:
            keys += len(item)
            children: Any = item.values()
        elif type(item) is list:
            children = item
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children if type(child) is dict or type(child) is list)
    return keys, deepest


def too_deep_at(text: str, max_depth: int) -> int | None:
    """Index of the first bracket nested deeper than ``max_depth`` (strings skipped), or None."""
    level = 0
    for match in _TOKENS.finditer(text):
        char = match.group()  # a bracket, or a whole string (skipped)
        if char in {"[", "{"}:
            level += 1
            if level > max_depth:
                return match.start()
        elif char in {"]", "}"}:
            level -= 1
    return None


def lone_surrogate_in(value: Any) -> str | None:
    """The first string (key or value) holding a lone surrogate, escaped for display, or None."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is str:
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return item.encode("utf-8", "backslashreplace").decode("ascii")[:60]
        elif type(item) is dict:
            stack.extend(item.keys())
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
    return None


def surrogate_reason(shown: str) -> str:
    return f'the string "{shown}" holds a lone UTF-16 surrogate (\\ud800-\\udfff not in a pair), which is not text'


def position(text: str, index: int) -> tuple[int, int]:
    """(line, column), 1-based, of ``index`` in ``text``."""
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def _locate(text: str, pattern: str, occurrence: int = 1) -> tuple[int | None, int | None]:
    matches = list(re.finditer(pattern, text))
    if len(matches) < occurrence:
        return None, None
    return position(text, matches[occurrence - 1].start())


def loads_strict(text: str, *, max_depth: int) -> Any:
    """Parse ``text`` refusing everything this module's docstring lists; raises StrictJSONError."""
    recursed = False
    value: Any = None
    try:
        value = STRICT_DECODER.decode(text)
    except json.JSONDecodeError as error:
        raise StrictJSONError(error.msg, error.lineno, error.colno) from None
    except RecursionError:
        recursed = True  # deeper than the parser's stack allows: located below
    except DuplicateKeyError as error:
        key_pattern = re.escape(json.dumps(error.key)) + r"\s*:"
        raise StrictJSONError(str(error), *_locate(text, key_pattern, occurrence=2)) from None
    except NonFiniteNumberError as error:
        number = r"(?<![\w.])" + re.escape(error.literal) + r"(?![\w.])"
        raise StrictJSONError(str(error), *_locate(text, number)) from None
    except ValueError as error:  # e.g. an integer of more than 4300 digits
        raise StrictJSONError(str(error)) from None
    index = too_deep_at(text, max_depth) if recursed or keys_and_depth(value)[1] > max_depth else None
    if recursed or index is not None:
        where = position(text, index) if index is not None else (None, None)
        raise StrictJSONError(f"nested more than {max_depth} levels deep", *where)
    shown = lone_surrogate_in(value)
    if shown is not None:
        raise StrictJSONError(surrogate_reason(shown), *_locate(text, _LONE_SURROGATE.pattern))
    return value
