"""Validate a Nova Forge multi-turn RFT dataset (JSONL) in one streaming pass.

Row format (README, "Starting a run"): ``{"id": str, "metadata": {"prompt": str | messages, "answer"?: str,
"task"?: str, "info"?: object}}``; ids unique; each optional field present on every row or on none.
Memory is constant in the file size apart from the id index (~24 bytes per row, see ``hashindex``).
"""

from __future__ import annotations

import contextlib
import time
import zlib
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mtrl.contracts.text import plural
from mtrl.settings.dataset_limits import (
    DATASET_MAX_BYTES,
    DATASET_MAX_LINE_BYTES,
    DATASET_MAX_ROWS,
    DATASET_MIN_ROWS,
)
from mtrl.validation.hashindex import HashIndex
from mtrl.validation.lines import Readable, iter_line_blocks
from mtrl.validation.prompt_length import LongestPrompts
from mtrl.validation.row_parser import FAST_REFUSED, parse_row
from mtrl.validation.row_shape import MAX_ID_CHARS, ROLES, decode_ordinary, ordinary_keys
from mtrl.validation.rows import json_type

if TYPE_CHECKING:  # settings stay a leaf package: no runtime import from here
    from mtrl.settings.pipeline import PipelineSettings

TaskCheck = Callable[[Mapping[str, Any]], list[str]]

OPTIONAL_FIELDS = ("answer", "task", "info")
METADATA_FIELDS = frozenset(("prompt", *OPTIONAL_FIELDS))
_SPLIT_BUCKETS = 10_000
_OPTIONAL_TYPES = (("answer", str, "a string"), ("task", str, "a string"), ("info", dict, "an object"))


def eval_split_of(row_id: str, eval_split: float) -> bool:
    """True when the row belongs to the held-out evaluation split (stable across processes and runs)."""
    return zlib.crc32(row_id.encode("utf-8")) % _SPLIT_BUCKETS < round(eval_split * _SPLIT_BUCKETS)


@dataclass(frozen=True)
class Limits:
    """A dataset's size limits; the defaults are the pipeline's (``mtrl.settings.dataset_limits``)."""

    max_bytes: int = DATASET_MAX_BYTES
    max_rows: int = DATASET_MAX_ROWS
    min_rows: int = DATASET_MIN_ROWS
    max_line_bytes: int = DATASET_MAX_LINE_BYTES
    max_errors: int = 50

    @classmethod
    def from_settings(cls, settings: PipelineSettings, *, max_errors: int) -> Limits:
        """The pipeline's dataset limits, so local checks refuse exactly what its Validate step refuses."""
        return cls(
            max_bytes=settings.dataset_max_bytes,
            max_rows=settings.dataset_max_rows,
            min_rows=settings.dataset_min_rows,
            max_line_bytes=settings.dataset_max_line_bytes,
            max_errors=max_errors,
        )


@dataclass(frozen=True)
class Issue:
    line: int | None  # None for whole-file problems
    code: str
    message: str

    def render(self) -> str:
        return f"line {self.line}: {self.message}" if self.line is not None else self.message


@dataclass
class ValidationReport:
    source: str
    environment: str | None
    limits: Limits
    rows: int = 0
    bytes_read: int = 0
    eval_rows: int = 0
    errors: list[Issue] = field(default_factory=list)
    error_count: int = 0
    error_counts: Counter[str] = field(default_factory=Counter)
    optional_fields: tuple[str, ...] = ()
    stopped_early: str | None = None
    duration_seconds: float = 0.0
    longest_prompts: list[dict[str, int]] | None = None  # with measure_prompts (mtrl.validation.prompt_length)

    @property
    def valid(self) -> bool:
        return self.error_count == 0

    def add(self, line: int | None, code: str, message: str) -> None:
        self.error_count += 1
        self.error_counts[code] += 1
        if len(self.errors) < self.limits.max_errors:
            self.errors.append(Issue(line, code, message))

    def summary(self) -> str:
        if self.valid:
            # "0 held out" next to a separate evaluation file's figures read as a contradiction: say "none".
            held = f"{self.eval_rows} held out for evaluation" if self.eval_rows else "none held out from this file"
            return f"{self.source}: valid ({plural(self.rows, 'row')}, {held})"
        first = self.errors[0].render() if self.errors else ""
        more = f" (and {self.error_count - 1} more)" if self.error_count > 1 else ""
        return f"{self.source}: {self.error_count} error(s); first: {first}{more}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "source": self.source,
            "environment": self.environment,
            "rows": self.rows,
            "train_rows": self.rows - self.eval_rows,
            "eval_rows": self.eval_rows,
            "bytes": self.bytes_read,
            "error_count": self.error_count,
            "errors": [{"line": issue.line, "code": issue.code, "message": issue.message} for issue in self.errors],
            "errors_truncated": self.error_count > len(self.errors),
            "error_counts": dict(sorted(self.error_counts.items())),
            "optional_fields": list(self.optional_fields),
            "stopped_early": self.stopped_early,
            "duration_seconds": round(self.duration_seconds, 3),
            **({"longest_prompts": self.longest_prompts} if self.longest_prompts is not None else {}),
            "limits": {
                "max_bytes": self.limits.max_bytes,
                "max_rows": self.limits.max_rows,
                "min_rows": self.limits.min_rows,
                "max_line_bytes": self.limits.max_line_bytes,
            },
        }


class _StopValidation(Exception):
    pass


class DatasetValidator:
    """Validates one dataset; afterwards ``ids`` and ``tasks`` index it (for overlap checks of another file).

    ``task_check`` is the environment's own row check (e.g. wordle answers); ``eval_split`` holds rows out
    by id hash and requires no task to appear in both splits; ``holdout`` is a validated evaluation
    dataset no training row may share an id or task with.
    """

    def __init__(
        self,
        *,
        limits: Limits | None = None,
        task_check: TaskCheck | None = None,
        environment: str | None = None,
        eval_split: float = 0.0,
        holdout: DatasetValidator | None = None,
        index_tasks: bool = False,
        measure_prompts: bool = False,
    ) -> None:
        self.limits = limits or Limits()
        self.task_check = task_check
        self.environment = environment
        self.eval_split = eval_split
        self.holdout = holdout
        self.ids = HashIndex()
        # Tasks (prompt + answer) are indexed only when an overlap check needs them.
        self.index_tasks = index_tasks or eval_split > 0 or holdout is not None
        self.tasks = HashIndex()
        self._optional: tuple[bool, ...] | None = None
        self._optional_line = 0
        self._optional_keys: set[str] | None = None  # the first row's metadata keys when it is ordinary-shaped
        # The longest prompts, for a run whose backend has a prompt length (the pipeline's Validate measures them).
        self._prompts = LongestPrompts() if measure_prompts else None

    def validate(self, stream: Readable, *, source: str, size: int | None = None) -> ValidationReport:
        report = ValidationReport(source=source, environment=self.environment, limits=self.limits)
        started = time.perf_counter()
        with contextlib.suppress(_StopValidation):
            self._run(stream, size, report)
        if report.rows < self.limits.min_rows and report.stopped_early is None:
            if report.rows == 0 and report.error_count == 0:
                report.add(None, "empty_file", "the dataset has no rows (the file is empty)")
            elif report.rows == 0:
                pass  # every line was already reported as broken
            else:
                report.add(None, "too_few_rows", f"{report.rows} rows; at least {self.limits.min_rows} are required")
        if self.eval_split > 0 and report.rows and report.eval_rows in (0, report.rows) and report.valid:
            report.add(
                None,
                "eval_split_empty",
                f"eval_split={self.eval_split} puts {report.eval_rows} of {report.rows} rows in the evaluation "
                "split; both splits need rows (add rows or change eval_split)",
            )
        report.optional_fields = tuple(
            name for name, present in zip(OPTIONAL_FIELDS, self._optional or (), strict=False) if present
        )
        report.duration_seconds = time.perf_counter() - started
        if self._prompts is not None:
            report.longest_prompts = self._prompts.to_list()
        return report

    def _stop(self, report: ValidationReport, line: int | None, code: str, message: str) -> None:
        report.add(line, code, message)
        report.stopped_early = message
        raise _StopValidation

    def _run(self, stream: Readable, size: int | None, report: ValidationReport) -> None:
        limits = self.limits
        if size is not None and size > limits.max_bytes:
            self._stop(report, None, "too_large", f"the file is {size} bytes; the limit is {limits.max_bytes} bytes")
        for first, lines, length, terminated in iter_line_blocks(stream, max_line_bytes=limits.max_line_bytes):
            if lines is not None:
                if first == 1 and size:  # size the indexes once for the rows the first block suggests
                    self._reserve(min(limits.max_rows, size * len(lines) // (sum(map(len, lines)) + len(lines))))
                self._check_lines(first, lines, terminated, report)
                continue
            report.bytes_read += length + terminated
            if report.bytes_read > limits.max_bytes:
                self._stop(report, first, "too_large", f"the file exceeds the limit of {limits.max_bytes} bytes")
            report.add(
                first, "line_too_long", f"the line is {length} bytes; the limit is {limits.max_line_bytes} bytes"
            )

    def _reserve(self, rows: int) -> None:
        self.ids.reserve(rows)
        if self.index_tasks:
            self.tasks.reserve(rows)

    def _check_lines(self, first: int, lines: list[bytes], terminated: bool, report: ValidationReport) -> None:
        """Every line of one block, from line ``first`` on (the hot loop: per-line work is kept to the minimum)."""
        read = report.bytes_read + sum(map(len, lines)) + len(lines) - (not terminated)
        if read > self.limits.max_bytes:
            self._check_lines_to_limit(first, lines, terminated, report)
        report.bytes_read = read
        if first == 1 and lines:
            lines[0] = self._check_start(lines[0], report)
        check_row, index_id, finish_row = self._check_row, self._index_id, self._finish_row
        # Every key written is followed by a colon, so a line with no more colons than its row has keys holds no
        # unknown or duplicate key (the cheapest count). A line with colons in its text counts '":' instead, unless
        # whitespace may stand between a key and its colon somewhere in the block (then the exact path decides).
        joined = b"\n".join(lines)
        spaced = 9 in joined or 13 in joined or joined.find(b" :") >= 0  # a tab, a carriage return, or ' :'
        del joined
        for offset, data in enumerate(lines):
            if not data or data.isspace():
                self._blank_line(first + offset, data, terminated or offset < len(lines) - 1, report)
                continue
            if 0 in data:  # an int operand: a plain byte search (a bytes one costs more than the search)
                message = "the file contains NUL bytes: it is binary, not JSON Lines text"
                self._stop(report, first + offset, "binary", message)
            # The fast tier: a row of the documented shape, checked by msgspec as it parses, whose keys the line's
            # bytes account for. Anything else is parsed again and takes every check one by one (``parse_row``).
            try:
                row = decode_ordinary(data)
                keys = ordinary_keys(row)
                ordinary = keys >= 0 and (data.count(b":") <= keys or (not spaced and data.count(b'":') <= keys))
            except FAST_REFUSED:
                ordinary = False
            if not ordinary:
                row, problem = parse_row(data)
                if problem is not None:
                    report.add(first + offset, *problem)
                    continue
            if report.rows >= self.limits.max_rows:
                message = f"more than {self.limits.max_rows} rows (the limit)"
                self._stop(report, first + offset, "too_many_rows", message)
            report.rows += 1
            if not ordinary:
                check_row(first + offset, row, report)
                continue
            # An ordinary row has passed every stateless check: what is left compares it with the rows before.
            row_id = index_id(first + offset, row["id"], report)
            metadata = row["metadata"]
            if metadata.keys() != self._optional_keys and self._check_optional(first + offset, metadata, report):
                continue
            if row_id is not None:
                finish_row(first + offset, row_id, metadata, report)

    def _check_lines_to_limit(self, first: int, lines: list[bytes], terminated: bool, report: ValidationReport) -> None:
        """The file outgrows the size limit in this block: check the lines before the one that crosses it, then stop."""
        read = report.bytes_read
        for offset, data in enumerate(lines):
            read += len(data) + (terminated or offset < len(lines) - 1)
            if read > self.limits.max_bytes:
                self._check_lines(first, lines[:offset], True, report)
                report.bytes_read = read
                self._stop(
                    report, first + offset, "too_large", f"the file exceeds the limit of {self.limits.max_bytes} bytes"
                )

    @staticmethod
    def _blank_line(number: int, data: bytes, terminated: bool, report: ValidationReport) -> None:
        if data or terminated:  # (an unterminated empty last line is the end of the file, not a line)
            report.add(number, "blank_line", "blank line (every line must hold one JSON object)")

    @staticmethod
    def _check_start(data: bytes, report: ValidationReport) -> bytes:
        if data.startswith(b"\xef\xbb\xbf"):
            report.add(1, "bom", "the file starts with a UTF-8 byte-order mark (BOM); save it as UTF-8 without BOM")
            return data[3:]
        if data.startswith((b"\xff\xfe", b"\xfe\xff")):
            raise_stop = "the file is UTF-16 encoded; save it as UTF-8"
            report.add(1, "not_utf8", raise_stop)
            report.stopped_early = raise_stop
            raise _StopValidation
        if data.startswith(b"\x1f\x8b"):
            message = "the file is gzip-compressed; upload uncompressed JSON Lines"
            report.add(1, "binary", message)
            report.stopped_early = message
            raise _StopValidation
        return data

    def _check_row(self, number: int, row: Any, report: ValidationReport) -> None:
        checked = self._check_shape(number, row, report)
        if checked is not None:
            row_id, metadata, problems = checked
            if not problems and row_id is not None:
                self._finish_row(number, row_id, metadata, report)

    def _finish_row(self, number: int, row_id: str, metadata: dict[str, Any], report: ValidationReport) -> None:
        """The checks of a row that passed all others: the environment's own, then the split and overlap ones."""
        problems = 0
        if self.task_check is not None:
            try:
                messages = self.task_check(metadata)
            except Exception as error:  # the environment's own check broke on this row: still a line-numbered error
                messages = [f"the environment's row check failed on this row ({type(error).__name__}: {error})"]
            for message in messages:
                report.add(number, "environment", message)
                problems += 1
        if self.eval_split > 0:
            in_eval = eval_split_of(row_id, self.eval_split)
            report.eval_rows += in_eval
        else:
            in_eval = False
        if self.index_tasks and not problems:
            self._check_overlap(number, row_id, metadata, in_eval, report)
        if self._prompts is not None:
            self._prompts.add(number, metadata)

    def _check_shape(
        self, number: int, row: Any, report: ValidationReport
    ) -> tuple[str | None, dict[str, Any], int] | None:
        """(id, metadata, problems reported) of any parsed row; None when it has no metadata object to check further."""
        if type(row) is not dict:
            report.add(number, "not_object", f"expected a JSON object, got {json_type(row)}")
            return None
        problems = 0
        for key in row:
            if key not in ("id", "metadata"):
                report.add(number, "unknown_key", f"unknown key '{key}' (a row has only 'id' and 'metadata')")
                problems += 1
        row_id = self._check_id(number, row, report)
        metadata = row.get("metadata")
        if type(metadata) is not dict:
            if "metadata" not in row:
                report.add(number, "bad_metadata", "missing 'metadata'")
            else:
                report.add(number, "bad_metadata", f"'metadata' must be an object, got {json_type(metadata)}")
            return None
        return row_id, metadata, problems + self._check_metadata(number, metadata, report)

    def _check_id(self, number: int, row: dict[str, Any], report: ValidationReport) -> str | None:
        """The row's id when it is valid and new; otherwise None (the problem is reported)."""
        row_id = row.get("id")
        if row_id is None:
            report.add(number, "missing_id", "missing 'id'" if "id" not in row else "'id' is null")
            return None
        if type(row_id) is not str:
            report.add(number, "bad_id", f"'id' must be a string, got {json_type(row_id)}")
            return None
        if not row_id.strip() or len(row_id) > MAX_ID_CHARS:
            report.add(number, "bad_id", f"'id' must be 1-{MAX_ID_CHARS} characters and not blank")
            return None
        return self._index_id(number, row_id, report)

    def _index_id(self, number: int, row_id: str, report: ValidationReport) -> str | None:
        """``row_id`` when no line before had it; otherwise None (the duplicate is reported)."""
        first = self.ids.setdefault(HashIndex.key_of(row_id), number)
        if first is not None:
            report.add(number, "duplicate_id", f"id {row_id!r} repeats the id of line {first}")
            return None
        return row_id

    def _check_metadata(self, number: int, metadata: dict[str, Any], report: ValidationReport) -> int:
        problems = 0
        for key in metadata:
            if key not in METADATA_FIELDS:
                report.add(number, "unknown_key", f"unknown key 'metadata.{key}' (allowed: prompt, answer, task, info)")
                problems += 1
        message = _prompt_problem(metadata)
        if message:
            report.add(number, "missing_prompt" if "prompt" not in metadata else "bad_prompt", message)
            problems += 1
        problems += self._check_optional(number, metadata, report)
        for name, expected, kind in _OPTIONAL_TYPES:
            value = metadata.get(name)
            if name in metadata and type(value) is not expected:
                report.add(number, "bad_type", f"'metadata.{name}' must be {kind}, got {json_type(value)}")
                problems += 1
        return problems

    def _check_optional(self, number: int, metadata: dict[str, Any], report: ValidationReport) -> int:
        """Optional fields on every row or on none: compared with the first row's."""
        present = ("answer" in metadata, "task" in metadata, "info" in metadata)
        if self._optional is None:
            self._optional, self._optional_line = present, number
            # An ordinary row's metadata keys are 'prompt' and its optional fields: equal sets, equal fields.
            self._optional_keys = {
                "prompt",
                *(name for name, here in zip(OPTIONAL_FIELDS, present, strict=True) if here),
            }
            return 0
        if present == self._optional:
            return 0
        problems = 0
        for name, here, there in zip(OPTIONAL_FIELDS, present, self._optional, strict=True):
            if here != there:
                has, lacks = (number, self._optional_line) if here else (self._optional_line, number)
                report.add(
                    number,
                    "inconsistent_optional",
                    f"'metadata.{name}' is on line {has} but not on line {lacks}: "
                    "optional fields must be on every row or on none",
                )
                problems += 1
        return problems

    def _check_overlap(
        self, number: int, row_id: str, metadata: dict[str, Any], in_eval: bool, report: ValidationReport
    ) -> None:
        task_key = HashIndex.key_of_task(metadata["prompt"], metadata.get("answer"))
        if self.holdout is not None:
            other = self.holdout.ids.get(HashIndex.key_of(row_id))
            if other is not None:
                report.add(number, "eval_overlap", f"id {row_id!r} is also in the evaluation dataset (line {other})")
                return
            other = self.holdout.tasks.get(task_key)
            if other is not None:
                report.add(
                    number,
                    "eval_overlap",
                    f"the same prompt and answer are in the evaluation dataset (line {other >> 1})",
                )
                return
        tagged = (number << 1) | in_eval
        first = self.tasks.setdefault(task_key, tagged)
        if first is not None and (first & 1) != in_eval and self.eval_split > 0:
            split, other_split = ("evaluation", "training") if in_eval else ("training", "evaluation")
            report.add(
                number,
                "eval_overlap",
                f"this {split} row repeats the prompt and answer of {other_split} row on line {first >> 1}",
            )


def _prompt_problem(metadata: dict[str, Any]) -> str | None:
    if "prompt" not in metadata:
        return "missing 'metadata.prompt'"
    prompt = metadata["prompt"]
    if type(prompt) is str:
        return None if prompt.strip() else "'metadata.prompt' is blank"
    if type(prompt) is list:
        return _check_messages(prompt)
    return f"'metadata.prompt' must be a string or a list of messages, got {json_type(prompt)}"


def _check_messages(messages: list[Any]) -> str | None:
    if not messages:
        return "'metadata.prompt' is an empty list of messages"
    for index, message in enumerate(messages):
        where = f"metadata.prompt[{index}]"
        if type(message) is not dict:
            return f"'{where}' must be an object with 'role' and 'content', got {json_type(message)}"
        role = message.get("role")
        if type(role) is not str or role not in ROLES:  # an unhashable role (a list) must not crash the check
            return f"'{where}.role' must be one of {', '.join(sorted(ROLES))}, got {role!r}"
        content = message.get("content")
        if type(content) is not str and type(content) is not list:
            return f"'{where}.content' must be a string or a list of parts, got {json_type(content)}"
    return None
