"""The judge's wire format: the program side (``_harness.py``) and the judge side (``judge.py``) agree, and
nothing the program writes can crash the judge or pass a check it should fail."""

from __future__ import annotations

import _json
import datetime
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mtrl.sandbox import Check, Raises, judge

HARNESS_SOURCE = (Path(judge.__file__).parent / "_harness.py").read_text(encoding="utf-8")
# The harness ends by running main(DATA); load its functions without that last statement.
HARNESS: dict[str, Any] = {}
exec(compile(HARNESS_SOURCE.rsplit("\nmain(", 1)[0], "_harness.py", "exec"), HARNESS)


def program_side_encode(value: Any) -> str:
    return str(HARNESS["_encode"](value, _json.encode_basestring_ascii))


# NaN only outside sets and dict keys (where no two NaNs are ever "the same" member, by design).
hashable = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.dates(),
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=6,
)
values = st.recursive(
    hashable,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(hashable, inner, max_size=3)
        | st.sets(hashable, max_size=3)
        | st.tuples(inner)
        | st.just(float("nan"))
    ),
    max_leaves=12,
)


def same_or_both_nan(actual: Any, expected: Any) -> bool:
    if type(expected) is float and math.isnan(expected):
        return type(actual) is float and math.isnan(actual)
    if type(expected) in (list, tuple):
        return type(actual) is type(expected) and all(
            same_or_both_nan(a, e) for a, e in zip(actual, expected, strict=True)
        )
    if type(expected) is dict:
        return (
            type(actual) is dict
            and len(actual) == len(expected)
            and all(key in actual and same_or_both_nan(actual[key], item) for key, item in expected.items())
            and all(any(judge.same(a, e) for a in actual) for e in expected)
        )
    return judge.same(actual, expected)


@settings(max_examples=200, deadline=None)
@given(value=values)
def test_an_answer_decodes_to_exactly_the_value_returned(value: Any) -> None:
    line = ('{"i":0,"v":' + program_side_encode(value) + "}").encode()
    parsed = judge.parse_answer(line)
    assert parsed is not None
    index, kind, decoded = parsed
    assert (index, kind) == (0, "value")
    assert same_or_both_nan(decoded, value)


@settings(max_examples=200, deadline=None)
@given(value=values)
def test_inputs_decode_in_the_sandbox_to_exactly_the_arguments(value: Any) -> None:
    text = json.dumps(judge.encode(value), allow_nan=False)
    assert same_or_both_nan(HARNESS["_decode"](json.loads(text)), value)


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"pass",
        b"deadbeef pass test_basic ''",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"i": 0, "v": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"i": 0, "v": NaN}',
        b'{"i": 0, "v": Infinity}',
        b'{"i": "0", "v": 1}',
        b'{"i": 0, "v": {"tuple": 1}}',
        b'{"i": 0, "v": {"dict": [[[1], 2]]}}',
        b'{"i": 0, "v": {"set": [[1]]}}',
        b'{"i": 0, "v": {"date": "yesterday"}}',
        b'{"i": 0, "v": {"tuple": [], "list": []}}',
        b'{"i": 0, "v": {"__reduce__": "os.system"}}',
        b'{"i": 0, "e": "ValueError"}',
        b"\xff\xfe",
    ],
)
def test_malformed_answers_never_crash_and_never_pass(line: bytes) -> None:
    parsed = judge.parse_answer(line)
    checks = [Check("f", (), None), Check("f", (), 1), Check("f", (), ()), Check("f", (), Raises("ValueError"))]
    if parsed is not None:
        _, kind, payload = parsed
        for check in checks:
            assert judge.verdict(check, (kind, payload)) != ""


def test_comparison_is_exact_about_types() -> None:
    assert judge.same([1, (2, 3)], [1, (2, 3)])
    assert not judge.same(1, True)
    assert not judge.same(1.0, 1)
    assert not judge.same([1, 2], (1, 2))
    assert not judge.same({1: "a"}, {True: "a"})
    assert not judge.same(float("nan"), float("nan"))
    assert judge.same(datetime.date(2024, 1, 1), datetime.date(2024, 1, 1))


def test_expected_exceptions_need_that_exception_or_a_subclass() -> None:
    check = Check("f", (), Raises("ValueError"))
    assert judge.verdict(check, ("raised", ["UnicodeDecodeError", "UnicodeError", "ValueError"])) == ""
    assert judge.verdict(check, ("raised", ["TypeError", "Exception"])) != ""
    assert judge.verdict(check, ("value", None)) != ""
    assert judge.verdict(check, None) != ""


def test_task_values_must_be_plain_data() -> None:
    with pytest.raises(TypeError, match="plain data"):
        judge.encode(object())
