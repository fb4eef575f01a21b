"""The dataset validator: each kind of bad row is found, on the right line, with a specific message."""

from __future__ import annotations

import codecs
import io
import json
from pathlib import Path
from typing import Any

import pytest

from mtrl.validation.dataset import DatasetValidator, Limits, eval_split_of
from mtrl.validation.hashindex import HashIndex
from mtrl.validation.lines import iter_lines
from mtrl.validation.sources import validate_file


def row(i: int, **metadata: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"prompt": f"Task {i}", "answer": "crane"}
    base.update(metadata)
    return {"id": f"r{i}", "metadata": {k: v for k, v in base.items() if v is not None}}


def data(*rows: Any) -> bytes:
    return b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in rows)


def check(content: bytes, **options: Any) -> Any:
    limits = options.pop("limits", Limits())
    return DatasetValidator(limits=limits, **options).validate(io.BytesIO(content), source="test.jsonl")


def codes(report: Any) -> list[tuple[int | None, str]]:
    return [(issue.line, issue.code) for issue in report.errors]


def test_valid_file() -> None:
    report = check(data(row(1), row(2, prompt=[{"role": "user", "content": "hi"}])))
    assert report.valid
    assert report.rows == 2
    assert report.optional_fields == ("answer",)
    assert report.to_dict()["error_count"] == 0


@pytest.mark.parametrize(
    ("content", "expected", "fragment"),
    [
        (b"", [(None, "empty_file")], "no rows"),
        (codecs.BOM_UTF8 + data(row(1)), [(1, "bom")], "byte-order mark"),
        ("x".encode("utf-16") + b"\n", [(1, "not_utf8")], "UTF-16"),
        (b"\x1f\x8b\x08\x00junk\n", [(1, "binary")], "gzip"),
        (data(row(1)) + b"PK\x03\x04\x00\x00\n", [(2, "binary")], "NUL"),
        (data(row(1), b'{"id": "r2", "metadata": {"prompt": "caf\xe9"}}'), [(2, "not_utf8")], "byte 41"),
        (data(row(1), b"{not json}"), [(2, "invalid_json")], "column 2"),
        (data(b'{"id": "r1", "metadata": {"prompt": NaN}}'), [(1, "invalid_json")], "NaN"),
        (data(row(1), b"[1, 2]"), [(2, "not_object")], "an array"),
        (data({"metadata": {"prompt": "x"}}), [(1, "missing_id")], "missing 'id'"),
        (data({"id": None, "metadata": {"prompt": "x"}}), [(1, "missing_id")], "null"),
        (data({"id": 7, "metadata": {"prompt": "x"}}), [(1, "bad_id")], "a number"),
        (data({"id": " ", "metadata": {"prompt": "x"}}), [(1, "bad_id")], "blank"),
        (
            data(row(1), row(2), {"id": "r1", "metadata": {"prompt": "y", "answer": "z"}}),
            [(3, "duplicate_id")],
            "line 1",
        ),
        (data({"id": "r1"}), [(1, "bad_metadata")], "missing 'metadata'"),
        (data({"id": "r1", "metadata": "x"}), [(1, "bad_metadata")], "a string"),
        (data(row(1, prompt=None)), [(1, "missing_prompt")], "metadata.prompt"),
        (data(row(1, prompt=5)), [(1, "bad_prompt")], "got a number"),
        (data(row(1, prompt="  ")), [(1, "bad_prompt")], "blank"),
        (data(row(1, prompt=[])), [(1, "bad_prompt")], "empty list"),
        (data(row(1, prompt=[{"role": "bot", "content": "x"}])), [(1, "bad_prompt")], "prompt[0].role"),
        (data(row(1, prompt=[{"role": "user", "content": 3}])), [(1, "bad_prompt")], "prompt[0].content"),
        (data(row(1, answer=5)), [(1, "bad_type")], "'metadata.answer' must be a string"),
        (data(row(1, info=[1])), [(1, "bad_type")], "'metadata.info' must be an object"),
        (data({**row(1), "extra": 1}), [(1, "unknown_key")], "'extra'"),
        (data(row(1, hint="x")), [(1, "unknown_key")], "metadata.hint"),
        (data(row(1), row(2, answer=None)), [(2, "inconsistent_optional")], "on line 1 but not on line 2"),
        (data(row(1, answer=None), row(2)), [(2, "inconsistent_optional")], "on line 2 but not on line 1"),
        (data(row(1)) + b"\n" + data(row(2)), [(2, "blank_line")], "blank line"),
    ],
)
def test_bad_rows(content: bytes, expected: list[tuple[int | None, str]], fragment: str) -> None:
    report = check(content)
    assert not report.valid
    assert codes(report) == expected
    assert fragment in report.errors[0].message


def test_limits() -> None:
    limits = Limits(max_rows=3, max_line_bytes=100, max_bytes=10_000, min_rows=2, max_errors=50)
    long_row = row(2, info={"pad": "x" * 200})
    report = check(data(row(1), long_row, row(3)), limits=limits)
    assert codes(report) == [(2, "line_too_long")]
    report = check(data(*[row(i) for i in range(5)]), limits=limits)
    assert codes(report) == [(4, "too_many_rows")]
    assert report.stopped_early
    assert codes(check(data(row(1)), limits=limits)) == [(None, "too_few_rows")]
    big = data(*[row(i) for i in range(200)])
    assert codes(DatasetValidator(limits=limits).validate(io.BytesIO(big), source="x", size=len(big)))[0] == (
        None,
        "too_large",
    )


def test_error_list_is_capped_but_counted() -> None:
    report = check(b"x\n" * 120, limits=Limits(max_errors=5))
    assert len(report.errors) == 5
    assert report.error_count == 120
    assert report.to_dict()["errors_truncated"] is True
    assert report.error_counts["invalid_json"] == 120


def test_environment_check_is_pluggable() -> None:
    def only_crane(metadata: Any) -> list[str]:
        return [] if metadata.get("answer") == "crane" else [f"answer {metadata.get('answer')!r} is not crane"]

    report = check(data(row(1), row(2, answer="slate")), task_check=only_crane)
    assert codes(report) == [(2, "environment")]
    assert "slate" in report.errors[0].message


def test_eval_split_overlap() -> None:
    rows = [row(i) for i in range(40)] + [{**row(i), "id": f"copy{i}"} for i in range(40)]
    report = check(data(*rows), eval_split=0.5)
    assert "eval_overlap" in {code for _, code in codes(report)}
    assert "repeats the prompt and answer" in report.errors[0].message
    clean = check(data(*[row(i) for i in range(40)]), eval_split=0.5)
    assert clean.valid
    assert 0 < clean.eval_rows < 40
    assert clean.eval_rows == sum(eval_split_of(f"r{i}", 0.5) for i in range(40))


def test_holdout_overlap() -> None:
    holdout = DatasetValidator(index_tasks=True)
    assert holdout.validate(io.BytesIO(data(row(1), row(2))), source="eval").valid
    train = DatasetValidator(holdout=holdout)
    report = train.validate(io.BytesIO(data(row(3), {**row(2), "id": "new"}, row(1))), source="train")
    assert codes(report) == [(2, "eval_overlap"), (3, "eval_overlap")]
    assert "(line 2)" in report.errors[0].message
    assert "id 'r1'" in report.errors[1].message


def test_eval_split_with_one_split_empty_is_an_error() -> None:
    report = check(data(row(1)), eval_split=0.01)
    assert codes(report) == [(None, "eval_split_empty")]


def test_eval_split_is_stable() -> None:
    assert [eval_split_of(f"id-{i}", 0.2) for i in range(50)] == [eval_split_of(f"id-{i}", 0.2) for i in range(50)]
    assert not any(eval_split_of(f"id-{i}", 0.0) for i in range(50))


def test_validate_file_with_wordle(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    path.write_bytes(data(row(1, answer="crane"), row(2, answer="qqqqq"), row(3, answer="xyzzy")))
    report, eval_report = validate_file(path, environment="wordle")
    assert eval_report is None
    assert [line for line, code in codes(report) if code == "environment"] == [2, 3]


def test_lines_split_across_chunks_and_oversized() -> None:
    content = b"a" * 10 + b"\n" + b"b" * 50 + b"\n" + b"c" * 5 + b"\n" + b"tail"
    lines = list(iter_lines(io.BytesIO(content), max_line_bytes=20, chunk_bytes=7))
    assert [(ln.number, ln.data, ln.length, ln.terminated) for ln in lines] == [
        (1, b"a" * 10, 10, True),
        (2, None, 50, True),
        (3, b"c" * 5, 5, True),
        (4, b"tail", 4, False),
    ]
    lines = list(iter_lines(io.BytesIO(b"x" * 100), max_line_bytes=20, chunk_bytes=8))
    assert [(ln.number, ln.data, ln.length) for ln in lines] == [(1, None, 100)]


def test_hash_index_grows_and_keeps_values() -> None:
    index = HashIndex(capacity=2)
    for i in range(5000):
        assert index.setdefault(HashIndex.key_of(f"id-{i}"), i) is None
    assert len(index) == 5000
    assert index.setdefault(HashIndex.key_of("id-4321"), 0) == 4321
    assert index.get(HashIndex.key_of("absent")) is None
