"""The validator's fast tier (msgspec, byte counts) answers exactly as the exact tier (the standard library's parse,
each check one by one), which is how the validator answered before it had a fast tier: same rows, same errors in the
same order with the same messages. Hostile variations of ordinary rows are generated to reach every branch where the
two could part: duplicate and unknown keys at each level, whitespace before a colon, colons and escaped quotes in
text, escaped colons, blank and over-long ids (Unicode whitespace too), lone surrogates, numbers out of range,
content parts, nested info, extra message keys, deep nesting.
"""

from __future__ import annotations

import functools
import io
import json
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mtrl.validation.dataset as dataset_module
from mtrl.validation import row_parser
from mtrl.validation.dataset import DatasetValidator, Limits, ValidationReport
from mtrl.validation.hashindex import HashIndex
from mtrl.validation.lines import iter_line_blocks, iter_lines
from mtrl.validation.row_shape import decode_ordinary

FUZZ = settings(
    max_examples=250,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

TEXT = st.sampled_from(["Guess", "a: b", 'say \\": here', "caf\\u00e9", "colon \\u003a", "x\\ud800", " ", "\\u3000"])
IDS = st.sampled_from(['"r"', '"r2"', '" "', '"\\u2003"', '""', '"' + "i" * 257 + '"', "7", "null", '"\\udc00"'])
ANSWERS = st.sampled_from(['"crane"', '"slate"', "5", "null", '"a\\":b"'])
INFO_VALUES = st.sampled_from(["1", "1.5", '"s"', "true", "null", "[1, 2]", '{"a": 1}', "1e999", "1" * 30, "[[[]]]"])
SEPARATORS = st.sampled_from([": ", ":", " : ", "\t:", ":\r"])


@st.composite
def rows(draw: Any) -> bytes:
    """A row close to the documented shape, with a few hostile changes drawn."""
    sep = draw(SEPARATORS)

    def pair(key: str, value: str) -> str:
        return f'"{key}"{sep}{value}'

    def message() -> str:
        role = draw(st.sampled_from(['"user"', '"system"', '"bot"', "[]", "1"]))
        content = draw(
            st.one_of(
                TEXT.map(lambda text: f'"{text}"'),
                st.just('[{"type": "text", "text": "x"}]'),
                st.just("5"),
            )
        )
        fields = [pair("role", role), pair("content", content)]
        if draw(st.booleans()) and draw(st.booleans()):
            fields.append(pair(draw(st.sampled_from(["name", "role", "content"])), '"n"'))
        return "{" + ", ".join(draw(st.permutations(fields))) + "}"

    prompt = draw(
        st.one_of(
            TEXT.map(lambda text: f'"{text}"'),
            st.lists(st.builds(message), min_size=0, max_size=3).map(lambda ms: "[" + ", ".join(ms) + "]"),
            st.just("5"),
        )
    )
    metadata = [pair("prompt", prompt)]
    if draw(st.booleans()):
        metadata.append(pair("answer", draw(ANSWERS)))
    if draw(st.booleans()):
        metadata.append(pair("task", '"t"'))
    if draw(st.booleans()):
        keys = draw(st.lists(st.sampled_from(["seed", "turns", "seed"]), max_size=3))
        metadata.append(pair("info", "{" + ", ".join(pair(key, draw(INFO_VALUES)) for key in keys) + "}"))
    if draw(st.integers(0, 6)) == 0:
        metadata.append(pair(draw(st.sampled_from(["hint", "prompt", "answer"])), '"x"'))
    row = [pair("id", draw(IDS)), pair("metadata", "{" + ", ".join(draw(st.permutations(metadata))) + "}")]
    if draw(st.integers(0, 6)) == 0:
        row.append(pair(draw(st.sampled_from(["extra", "id", "metadata"])), '"x"'))
    if draw(st.integers(0, 10)) == 0:
        row.append(pair("deep", "[" * 70 + "]" * 70))
    return ("{" + ", ".join(draw(st.permutations(row))) + "}").encode()


DATASETS = st.lists(rows(), min_size=1, max_size=6)


def _report(data: bytes, **options: Any) -> dict[str, Any]:
    report = DatasetValidator(limits=Limits(max_errors=1000), **options).validate(io.BytesIO(data), source="f")
    document = report.to_dict()
    document.pop("duration_seconds")
    return document


def _refuse(data: bytes) -> Any:
    raise msgspec.DecodeError("this test takes the exact tier")


def _exact_report(monkeypatch: pytest.MonkeyPatch, data: bytes, *, stdlib_only: bool, **options: Any) -> Any:
    with monkeypatch.context() as patched:
        patched.setattr(dataset_module, "decode_ordinary", _refuse)
        if stdlib_only:  # the exact tier's own parse also through the standard library: the validator before msgspec
            patched.setattr(row_parser, "decode_fast", _refuse)
        return _report(data, **options)


@FUZZ
@given(lines=DATASETS, eval_split=st.sampled_from([0.0, 0.5]), wordle=st.booleans())
def test_fast_and_exact_tiers_answer_alike(lines: list[bytes], eval_split: float, wordle: bool) -> None:
    data = b"\n".join(lines) + b"\n"
    check = (lambda metadata: [] if metadata.get("answer") == "crane" else ["not crane"]) if wordle else None
    options = {"eval_split": eval_split, "task_check": check}
    fast = _report(data, **options)
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert fast == _exact_report(monkeypatch, data, stdlib_only=False, **options)
        assert fast == _exact_report(monkeypatch, data, stdlib_only=True, **options)


def _same(left: Any, right: Any) -> bool:
    """Equal values of equal types, dict keys in the same order (1 == 1.0 is not enough)."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return list(left) == list(right) and all(_same(left[key], right[key]) for key in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(_same(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, float):
        return repr(left) == repr(right)  # -0.0 is not 0.0
    return bool(left == right)


JSON_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(10**30), max_value=10**30),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)),
    max_leaves=25,
)


@FUZZ
@given(value=JSON_VALUES, ascii_only=st.booleans())
def test_msgspec_returns_what_json_loads_returns(value: Any, ascii_only: bool) -> None:
    data = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    try:
        fast = row_parser.decode_fast(data)
    except row_parser.FAST_REFUSED:
        return  # refused lines take the standard library's parse (the test above covers what they answer)
    assert _same(fast, json.loads(data))


@FUZZ
@given(line=rows())
def test_an_ordinary_row_decodes_as_json_loads_decodes_it(line: bytes) -> None:
    try:
        ordinary = decode_ordinary(line)
    except row_parser.FAST_REFUSED:
        return
    # msgspec leaves out undeclared keys: equal when the line has none (the validator counts them to know).
    everything = json.loads(line)
    if not _has_undeclared_keys(everything):
        assert _same(ordinary, everything)


def _has_undeclared_keys(row: dict[str, Any]) -> bool:
    metadata = row["metadata"]
    prompt = metadata["prompt"]
    messages = prompt if isinstance(prompt, list) else []
    return (
        set(row) != {"id", "metadata"}
        or not set(metadata) <= {"prompt", "answer", "task", "info"}
        or any(set(message) != {"role", "content"} for message in messages)
    )


def test_a_message_role_that_is_not_text_is_a_line_numbered_error() -> None:
    """Before: an unhashable role (a list or an object) raised TypeError out of the validator."""
    for role in (b"[]", b'{"a": 1}'):
        line = b'{"id": "a", "metadata": {"prompt": [{"role": ' + role + b', "content": "x"}]}}\n'
        report = DatasetValidator().validate(io.BytesIO(line), source="f")
        assert [(issue.line, issue.code) for issue in report.errors] == [(1, "bad_prompt")]
        assert "'metadata.prompt[0].role' must be one of assistant, system, tool, user" in report.errors[0].message


def test_a_colon_or_a_separator_inside_text_is_not_a_key() -> None:
    lines = [
        b'{"id": "a", "metadata": {"prompt": [{"role": "user", "content": "Game 1: say \\": here"}], "answer": "x"}}',
        b'{"id": "b", "metadata": {"prompt": "one: two: three", "answer": "y"}}',
    ]
    report = DatasetValidator().validate(io.BytesIO(b"\n".join(lines)), source="f")
    assert report.valid, report.errors


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b'{"id": "a", "metadata": {"prompt": "p", "answer": "x", "answer": "y"}}', "duplicate_key"),
        (b'{"id": "a", "metadata": {"prompt": "p", "info": {"k": 1, "k": 2}}}', "duplicate_key"),
        (b'{"id": "a", "metadata": {"prompt": [{"role": "user", "content": "x", "role": "tool"}]}}', "duplicate_key"),
        (b'{"id": "a", "metadata": {"prompt": "p: q", "answer": "x"}, "id" : "b"}', "duplicate_key"),
        (b'{"id": "a", "metadata": {"prompt": "p", "hint": "h"}}', "unknown_key"),
        (b'{"id": "a", "extra": 1, "metadata": {"prompt": "p"}}', "unknown_key"),
        (b'{"id": "\\u2003", "metadata": {"prompt": "p"}}', "bad_id"),
        (b'{"id": "a", "metadata": {"prompt": "\\u3000"}}', "bad_prompt"),
    ],
)
def test_what_the_typed_parse_would_drop_or_allow_is_still_refused(line: bytes, code: str) -> None:
    report = DatasetValidator().validate(io.BytesIO(line + b"\n"), source="f")
    assert [issue.code for issue in report.errors] == [code]


@FUZZ
@given(
    data=st.lists(st.sampled_from([b"a", b"bb", b"\n", b"x" * 9, b"\r"]), max_size=30).map(b"".join),
    chunk=st.integers(1, 12),
    limit=st.integers(1, 10),
)
def test_blocks_hold_the_same_lines_as_a_plain_split(data: bytes, chunk: int, limit: int) -> None:
    parts = data.split(b"\n")
    expected = [
        (number, part if len(part) <= limit else None, len(part), number < len(parts))
        for number, part in enumerate(parts, 1)
        if part or number < len(parts)
    ]
    lines = list(iter_lines(io.BytesIO(data), max_line_bytes=limit, chunk_bytes=chunk))
    assert [tuple(line) for line in lines] == expected
    numbers = []
    for block in iter_line_blocks(io.BytesIO(data), max_line_bytes=limit, chunk_bytes=chunk):
        numbers += [block.first] if block.lines is None else range(block.first, block.first + len(block.lines))
    assert numbers == [line.number for line in lines]


@pytest.mark.parametrize("crossing", [1, 2, 3])
def test_a_stream_outgrowing_the_size_limit_stops_on_the_line_that_crosses_it(crossing: int) -> None:
    """No size given (a stream): the limit is found while reading, on any line of a block, the first one too."""
    line = b'{"id": "r%d", "metadata": {"prompt": "p"}}\n'
    data = b"".join(line % number for number in range(5))
    limits = Limits(max_bytes=len(line % 0) * crossing - 1)
    report = DatasetValidator(limits=limits).validate(io.BytesIO(data), source="f")
    assert [(issue.line, issue.code) for issue in report.errors] == [(crossing, "too_large")]
    assert report.rows == crossing - 1


def test_a_reserved_index_keeps_what_it_held() -> None:
    index = HashIndex(capacity=4)
    for number in range(10):
        index.setdefault(HashIndex.key_of(f"id-{number}"), number)
    index.reserve(50_000)
    assert [index.get(HashIndex.key_of(f"id-{number}")) for number in range(10)] == list(range(10))
    assert index.setdefault(HashIndex.key_of("id-3"), 99) == 3
    assert len(index) == 10


def test_the_first_block_sizes_the_id_index_within_the_row_limit() -> None:
    data = b"".join(b'{"id": "r%d", "metadata": {"prompt": "p"}}\n' % number for number in range(100))
    validator = DatasetValidator(limits=Limits(max_rows=1000))
    report: ValidationReport = validator.validate(io.BytesIO(data), source="f", size=len(data) * 1000)
    assert report.valid
    assert validator.ids._mask + 1 == 2048  # room for max_rows (1000) keys at half load, not for 100,000


def _transcript_line(index: int, text: str) -> bytes:
    messages = [{"role": "user", "content": f"{text} turn {turn} of game {index}"} for turn in range(12)]
    return json.dumps({"id": f"t{index}", "metadata": {"prompt": messages, "answer": "crane"}}).encode()


def test_the_block_is_searched_for_spaced_colons_only_when_a_line_needs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # Searching text full of spaces for ' :' cost long transcripts more than parsing them (issue 38 item 17): a
    # block whose lines have no more colons than keys skips it; a colon in the text makes it run, once per block.
    searched: list[int] = []
    original = dataset_module._Block.spaced.func  # type: ignore[attr-defined]

    def counted(block: Any) -> bool:
        searched.append(len(block.lines))
        return bool(original(block))

    cached = functools.cached_property(counted)
    cached.__set_name__(dataset_module._Block, "spaced")
    monkeypatch.setattr(dataset_module._Block, "spaced", cached)
    plain = b"\n".join(_transcript_line(i, "guess a word") for i in range(50)) + b"\n"
    report = DatasetValidator().validate(io.BytesIO(plain), source="plain.jsonl")
    assert (report.valid, report.rows, searched) == (True, 50, [])
    colons = b"\n".join(_transcript_line(i, "note: guess") for i in range(50)) + b"\n"
    report = DatasetValidator().validate(io.BytesIO(colons), source="colons.jsonl")
    assert (report.valid, report.rows) == (True, 50)
    assert searched == [50]  # the one block of 50 lines, searched once
    # What the search is for: a key written with a space before its colon is still found duplicated.
    duplicated = b'{"id": "d", "id" : "e", "metadata": {"prompt": "note: x", "answer": "crane"}}\n'
    report = DatasetValidator().validate(io.BytesIO(colons + duplicated), source="duplicated.jsonl")
    assert not report.valid
    assert "duplicate key 'id'" in report.to_dict()["errors"][0]["message"]
