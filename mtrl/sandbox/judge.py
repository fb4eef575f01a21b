"""The trusted judge: hidden test cases as data, and the verdict from what the sandboxed program answered.

The sandboxed program receives the *inputs* of each check as JSON and answers each with JSON (a value or the
exception it raised). Only this module — in the worker, a process the program cannot signal, trace, read or
write — holds the expected values and the comparison. What comes back is parsed with the C JSON scanner into
plain values (no pickles, no objects, no callables), so anything the program writes on its answer channel is
at most an answer: it could have produced the same answer honestly, and it earns a pass only when it equals
the expected value.

Wire format (both directions): JSON, where ``null``/booleans/strings/integers/finite floats/arrays stand for
themselves (arrays are lists) and single-key objects tag the other types: ``{"tuple": [...]}``,
``{"dict": [[key, value], ...]}``, ``{"set": [...]}``, ``{"frozenset": [...]}``, ``{"date": "2024-06-10"}``,
``{"float": "nan"}`` (non-finite floats), ``{"other": "TypeName"}`` (anything else: never equal to an
expected value). The same encoder lives in ``_harness.py`` for the program's side.
"""

from __future__ import annotations

import datetime
import json
import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Raises:
    """Expected outcome of a check: the call raises this built-in exception (or a subclass of it)."""

    error: str


@dataclass(frozen=True)
class Check:
    """One call of the program: ``call(*args)`` must return ``expect`` (same type, recursively) or raise."""

    call: str
    args: tuple[Any, ...]
    expect: Any


@dataclass(frozen=True)
class Case:
    """A hidden test: passes when every one of its checks passes (like a test function of asserts)."""

    name: str
    checks: tuple[Check, ...]


class MalformedAnswerError(ValueError):
    """The program's answer is not in the wire format (treated as a wrong answer, never as a crash)."""


def encode(value: Any) -> Any:  # noqa: PLR0911 - one return per type
    """A JSON-ready form of a trusted input value (inputs are built by task authors, so types are checked)."""
    kind = type(value)
    if value is None or kind in (bool, str, int):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"float": repr(value)}
    if kind is list:
        return [encode(item) for item in value]
    if kind is tuple:
        return {"tuple": [encode(item) for item in value]}
    if kind is dict:
        return {"dict": [[encode(key), encode(item)] for key, item in value.items()]}
    if kind in (set, frozenset):
        return {kind.__name__: [encode(item) for item in value]}
    if kind is datetime.date:
        return {"date": value.isoformat()}
    raise TypeError(f"check values must be plain data, not {kind.__name__}")


def _reject_constant(text: str) -> Any:
    raise MalformedAnswerError(f"non-standard JSON constant {text}")


def decode(document: Any) -> Any:  # noqa: PLR0911, PLR0912 - one return per type tag
    """The value a parsed JSON answer stands for; MalformedAnswerError for anything outside the format."""
    if document is None or type(document) in (bool, str, int):
        return document
    if type(document) is float:
        return document
    if type(document) is list:
        return [decode(item) for item in document]
    if type(document) is not dict or len(document) != 1:
        raise MalformedAnswerError("an object must have exactly one type tag")
    ((tag, body),) = document.items()
    if tag == "float" and body in ("nan", "inf", "-inf"):
        return float(body)
    if tag == "date" and type(body) is str:
        try:
            return datetime.date.fromisoformat(body)
        except ValueError:
            raise MalformedAnswerError(f"bad date {body[:40]!r}") from None
    if tag == "other" and type(body) is str:
        return _Unmatchable(body[:100])
    if type(body) is not list:
        raise MalformedAnswerError(f"bad {str(tag)[:40]!r} body")
    try:
        if tag == "tuple":
            return tuple(decode(item) for item in body)
        if tag in ("set", "frozenset"):
            items = [decode(item) for item in body]
            return set(items) if tag == "set" else frozenset(items)
        if tag == "dict":
            pairs = [(decode(pair[0]), decode(pair[1])) for pair in body if type(pair) is list and len(pair) == 2]
            if len(pairs) != len(body):
                raise MalformedAnswerError("dict entries must be [key, value] pairs")
            return dict(pairs)
    except TypeError as error:  # unhashable key or set member
        raise MalformedAnswerError(str(error)[:100]) from None
    raise MalformedAnswerError(f"unknown type tag {str(tag)[:40]!r}")


class _Unmatchable:
    """A value of a type the wire format cannot carry: equal to nothing (``same`` checks exact types first)."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<{self.type_name} object>"


def parse_answer(line: bytes) -> tuple[int, str, Any] | None:  # noqa: PLR0911
    """``(check index, "value" | "raised" | "program_failed", payload)`` from one answer line, else None.

    Lines that are not answers (anything the program printed to the channel) are ignored; the payload of
    "raised" is the list of exception class names the program reported.
    """
    try:
        document = json.loads(line, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None
    if type(document) is not dict:
        return None
    if "program_failed" in document:
        return -1, "program_failed", str(document["program_failed"])[:500]
    index = document.get("i")
    if type(index) is not int:
        return None
    if "v" in document:
        try:
            return index, "value", decode(document["v"])
        except (MalformedAnswerError, RecursionError):
            return index, "value", _Unmatchable("malformed")
    raised = document.get("e")
    if type(raised) is list and all(type(name) is str for name in raised):
        return index, "raised", raised
    return None


def same(actual: Any, expected: Any) -> bool:
    """Equal with exact types, recursively: 1, 1.0 and True are three different answers."""
    if type(actual) is not type(expected):
        return False
    if type(expected) in (list, tuple):
        return len(actual) == len(expected) and all(same(a, e) for a, e in zip(actual, expected, strict=True))
    if type(expected) is dict:
        return len(actual) == len(expected) and all(
            any(same(key, wanted) for key in actual) and same(actual[wanted], value)
            for wanted, value in expected.items()
        )
    if type(expected) in (set, frozenset):
        return len(actual) == len(expected) and all(any(same(a, e) for a in actual) for e in expected)
    return bool(actual == expected)


def verdict(check: Check, answer: tuple[str, Any] | None) -> str:
    """Empty when the answer passes the check, else why it fails (for the result's ``failures``)."""
    if answer is None:
        return "no answer (the program stopped or hung before this check)"
    kind, payload = answer
    if isinstance(check.expect, Raises):
        if kind == "raised" and check.expect.error in payload:
            return ""
        return f"expected {check.expect.error}" + (f", got {payload[0]}" if kind == "raised" and payload else "")
    if kind == "value" and same(payload, check.expect):
        return ""
    if kind == "raised":
        return f"{check.call} raised {payload[0] if payload else 'an exception'}"
    return f"{check.call}{_short(check.args)} returned a wrong value"


def _short(args: tuple[Any, ...]) -> str:
    text = repr(args)
    return text if len(text) <= 80 else text[:77] + "..."


def check_inputs(cases: tuple[Case, ...] | list[Case]) -> str:
    """The JSON the program receives: every check's function name and arguments, nothing expected."""
    calls = [{"call": check.call, "args": encode(list(check.args))} for case in cases for check in case.checks]
    return json.dumps(calls, ensure_ascii=True, allow_nan=False)
