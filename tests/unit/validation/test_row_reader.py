"""The one JSONL row reader: line numbers, blank lines, its one error, and every kind of source."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from mtrl.validation.rows import RowError, RowSource, iter_rows, row_ids, task_key

TEXT = '{"id": "a", "metadata": {"answer": "x"}}\n\n  \n{"id": "b", "metadata": {"answer": "y"}}\n'


class _ReadOnly:
    """A stream with only ``read`` (as an S3 body): iterating it would give chunks, not lines."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def read(self, size: int = -1, /) -> bytes:
        return self._data.read(min(size, 7) if size > 0 else size)


def test_every_source_gives_the_same_numbered_rows(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(TEXT, encoding="utf-8")
    expected = [(1, {"id": "a", "metadata": {"answer": "x"}}), (4, {"id": "b", "metadata": {"answer": "y"}})]
    sources: list[RowSource] = [
        TEXT,
        TEXT.encode(),
        path,
        TEXT.splitlines(),
        io.BytesIO(TEXT.encode()),
        _ReadOnly(TEXT.encode()),
    ]
    for source in sources:
        assert list(iter_rows(source)) == expected, source
    with path.open("rb") as handle:
        assert list(iter_rows(handle)) == expected


def test_a_line_ends_at_a_newline_only() -> None:
    line = '{"id": "a", "metadata": {"prompt": "one\u2028two\u2029three"}}\r\n'
    assert [row["metadata"]["prompt"] for _number, row in iter_rows(line)] == ["one\u2028two\u2029three"]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("nope", "not valid JSON: Expecting value at column 1"),
        ("[1, 2]", "expected a JSON object, got an array"),
        ("null", "expected a JSON object, got null"),
        ("[" * 100_000, "not valid JSON"),
    ],
)
def test_a_line_that_is_no_object_is_a_row_error_with_its_number(line: str, reason: str) -> None:
    with pytest.raises(RowError) as raised:
        list(iter_rows(f'{{"id": "a"}}\n\n{line}\n'))
    assert raised.value.line == 3
    assert str(raised.value).startswith(f"line 3: {reason}")
    assert isinstance(raised.value, ValueError)


def test_skip_invalid_passes_over_lines_that_are_no_objects() -> None:
    assert [number for number, _row in iter_rows('nope\n[1]\n{"a": 1}\n', skip_invalid=True)] == [3]


def test_row_ids_name_each_task_by_its_first_row() -> None:
    text = TEXT + '{"id": "c", "metadata": {"answer": "x"}}\n{"metadata": {"answer": "z"}}\nnope\n'
    assert row_ids(text) == {task_key({"answer": "x"}): "a", task_key({"answer": "y"}): "b"}
    assert task_key({"b": 1, "a": 2}) == task_key({"a": 2, "b": 1})
