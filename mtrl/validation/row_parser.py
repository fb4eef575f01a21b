"""One dataset line to one row, strictly and fast: the validator's JSON parser.

An ordinary line costs one call into msgspec's C parser, which by itself refuses most of what ``json.loads`` lets
through and a dataset must not hold (see ``strict_json``): NaN and Infinity, numbers that overflow a double, lone
surrogates (escaped, or as UTF-8 bytes), invalid UTF-8, nesting past the interpreter's recursion limit. What it
accepts it returns as ``json.loads`` would (integers exact, up to the same 4,300 digits; floats correctly rounded;
the last of two equal keys). A line it refuses is parsed again the standard library's way (``parse_strictly``),
so every error reads exactly as before and nothing it lets through goes unchecked. The two rules msgspec does not
enforce, unique keys and at most MAX_ROW_DEPTH levels, are settled by counting bytes (``_strict_problem``): only a
line those counts cannot clear is looked at value by value.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from mtrl.validation.rows import json_error_reason
from mtrl.validation.strict_json import (
    FAST_DECODER,
    MAX_ROW_DEPTH,
    STRICT_DECODER,
    DuplicateKeyError,
    keys_and_depth,
    lone_surrogate_in,
    surrogate_reason,
)

Problem = tuple[str, str]  # (error code, message)

decode_fast = msgspec.json.Decoder().decode
# What msgspec refuses with: ValidationError (a number out of range) is a DecodeError; deep nesting RecursionError.
FAST_REFUSED = (msgspec.DecodeError, RecursionError, UnicodeDecodeError)
# A key's closing quote, optional whitespace and the colon: every key has one (so their count bounds the keys).
_KEY_SEPARATOR = re.compile(rb'"[ \t\r]*:')
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # the start of a \\ud800-\\udfff escape
_DEEP = f"the row is nested more than {MAX_ROW_DEPTH} levels deep"


def parse_row(data: bytes) -> tuple[Any, Problem | None]:
    """(row, None) for an acceptable line, else (None, problem). ``data`` is one line without its newline."""
    try:
        row = decode_fast(data)
    except FAST_REFUSED:
        return parse_strictly(data)
    problem = strict_problem(data, row)
    return (row, None) if problem is None else (None, problem)


def parse_strictly(data: bytes) -> tuple[Any, Problem | None]:
    """(row, None) for an acceptable line, else (None, problem): the standard library's parse and every strict check.

    Slower than msgspec, and where every parse error's message comes from. ``data`` is one line without its newline.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        return None, ("not_utf8", f"not valid UTF-8 at byte {error.start + 1} of the line")
    try:
        row = FAST_DECODER.decode(text)
    except RecursionError:
        return None, ("too_deep", _DEEP)
    except ValueError as error:
        return None, ("invalid_json", f"not valid JSON: {json_error_reason(error)}")
    if _SURROGATE_ESCAPE.search(data) is not None:
        shown = lone_surrogate_in(row)
        if shown is not None:
            return None, ("lone_surrogate", surrogate_reason(shown))
    problem = strict_problem(data, row)
    return (row, None) if problem is None else (None, problem)


def strict_problem(data: bytes, row: Any) -> Problem | None:
    """A duplicate key or nesting beyond MAX_ROW_DEPTH in a parsed line, checked exactly only when counts allow it.

    A duplicate key needs more key separators written than keys parsed; nesting beyond MAX_ROW_DEPTH needs objects
    outside the documented ones (then the keys tell) or that many ``[``.
    """
    # Every key written is followed by '":' (or by '"', whitespace and ':'), so this counts at least the keys.
    if b" :" in data or b"\t" in data or b"\r" in data:
        written = len(_KEY_SEPARATOR.findall(data))
    else:
        written = data.count(b'":')
    if written <= _known_keys(row):
        # Every key is in the documented objects (row, metadata, info, messages, content parts: at most 6 levels),
        # so anything deeper is arrays or empty objects, each level at least one '['.
        deep = data.count(b"[") > MAX_ROW_DEPTH - 7 and keys_and_depth(row)[1] > MAX_ROW_DEPTH
    else:
        keys, depth = keys_and_depth(row)
        deep = depth > MAX_ROW_DEPTH
        if not deep and written > keys:
            try:  # a '\\":' inside a string also looks like a separator: only the strict parse can tell
                STRICT_DECODER.decode(data.decode("utf-8"))
            except DuplicateKeyError as error:
                return "duplicate_key", f"duplicate key {error.key!r} in one object (the last value would silently win)"
    return ("too_deep", _DEEP) if deep else None


def _known_keys(row: Any) -> int:
    """Keys of the documented objects of a row (row, metadata, info, messages, content parts): cheap, a lower bound."""
    if type(row) is not dict:
        return 0
    count = len(row)
    metadata = row.get("metadata")
    if type(metadata) is dict:
        count += len(metadata)
        info = metadata.get("info")
        if type(info) is dict:
            count += len(info)
        prompt = metadata.get("prompt")
        if type(prompt) is list:
            for message in prompt:
                if type(message) is dict:
                    count += len(message)
                    content = message.get("content")
                    if type(content) is list:
                        count += sum(len(part) for part in content if type(part) is dict)
    return count
