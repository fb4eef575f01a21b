"""The one JSONL row reader: every dataset row read outside the validator comes through ``iter_rows``.

A line is split off at ``\\n`` only, as the validator splits a dataset (``str.splitlines`` would also split at
U+2028 and other characters a JSON string may hold unescaped). Blank lines are skipped, every other line must hold
one JSON object; a line that does not raises ``RowError`` with its 1-based number. The rows are parsed as
``json.loads`` parses them: a reader runs on datasets the validator (``mtrl.validation.dataset``, strict JSON) has
already accepted, or on an environment's own sample files.

This module imports only the standard library (and ``lines``): the trainer image, the workers and the Lambdas read
rows through it.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

from mtrl.validation.lines import Readable, iter_line_blocks

# What a reader takes: the text or bytes of a whole file, a path, a file object or an iterable of lines (such as
# ``mtrl.backends._aws.iter_s3_lines``), or a stream with only ``read`` (an S3 body: iterating it gives chunks).
RowSource = str | bytes | os.PathLike[str] | Readable | Iterable[str] | Iterable[bytes]


class RowError(ValueError):
    """A dataset line that is not one JSON object; ``line`` is 1-based, ``reason`` says what is wrong."""

    def __init__(self, line: int, reason: str) -> None:
        self.line, self.reason = line, reason
        super().__init__(f"line {line}: {reason}")


def iter_rows(source: RowSource, *, skip_invalid: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, row)`` for every non-blank line of ``source``; ``RowError`` for a line that is not a JSON
    object, or with ``skip_invalid`` such lines are passed over."""
    for number, line in enumerate(_lines(source), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as error:  # JSONDecodeError, or UnicodeDecodeError for bytes
            if skip_invalid:
                continue
            raise RowError(number, f"not valid JSON: {json_error_reason(error)}") from None
        except RecursionError:
            if skip_invalid:
                continue
            raise RowError(number, "not valid JSON: nested too deeply to parse") from None
        if type(row) is not dict:
            if skip_invalid:
                continue
            raise RowError(number, f"expected a JSON object, got {json_type(row)}")
        yield number, row


def task_key(metadata: Mapping[str, Any]) -> str:
    """A task's identity across files: its metadata (what an environment's ``reset`` takes) as canonical JSON."""
    return json.dumps(metadata, sort_keys=True, default=str)


def row_ids(source: RowSource) -> dict[str, str]:
    """Each row's ``id`` by its task (``task_key`` of its metadata): how a report names a task as the dataset does.
    Lines that are not rows with a string ``id`` and a ``metadata`` object are passed over."""
    ids: dict[str, str] = {}
    for _number, row in iter_rows(source, skip_invalid=True):
        if isinstance(row.get("metadata"), dict) and isinstance(row.get("id"), str):
            ids.setdefault(task_key(row["metadata"]), row["id"])
    return ids


def json_error_reason(error: ValueError) -> str:
    """Why one line is not JSON; the column, not ``json``'s "line 1" (the line is the file's line, said apart)."""
    if isinstance(error, json.JSONDecodeError):
        return f"{error.msg} at column {error.colno}"
    return str(error)


def _lines(source: RowSource) -> Iterator[str | bytes]:
    if isinstance(source, str):
        return iter(source.split("\n"))
    if isinstance(source, bytes):
        return iter(source.split(b"\n"))
    if isinstance(source, os.PathLike):
        return _file_lines(Path(source))
    if hasattr(source, "read") and not isinstance(source, io.IOBase):
        return _stream_lines(cast(Readable, source))  # iterating such a stream gives chunks, not lines
    return iter(cast("Iterable[str | bytes]", source))  # a file object, or lines


def _file_lines(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:  # binary: lines end at b"\n" only
        yield from handle


def _stream_lines(stream: Readable) -> Iterator[bytes]:
    for _first, lines, _length, _terminated in iter_line_blocks(stream, max_line_bytes=sys.maxsize):
        yield from lines or ()


def json_type(value: Any) -> str:
    """What a parsed JSON value is, for a message ("an array")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
