"""Split a byte stream into lines with bounded memory, whatever the stream's size or line lengths."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple, Protocol

CHUNK_BYTES = 1024 * 1024


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class Line(NamedTuple):
    """One line without its terminator; ``data`` is None for an oversized line (only its length is kept)."""

    number: int  # 1-based
    data: bytes | None
    length: int
    terminated: bool  # False only for a last line with no trailing newline


class Block(NamedTuple):
    """Consecutive lines from line ``first`` on: each within the limit (``lines``), or one oversized line.

    A block is what one read of the stream completes, so a hot loop walks a list instead of a ``Line`` per line.
    """

    first: int  # the 1-based number of the block's first line
    lines: list[bytes] | None  # without terminators; None for one oversized line
    length: int  # an oversized line's length (0 for a block of lines)
    terminated: bool  # False only when the block ends with a last line that has no trailing newline


def iter_line_blocks(stream: Readable, *, max_line_bytes: int, chunk_bytes: int = CHUNK_BYTES) -> Iterator[Block]:
    """The lines of ``stream`` in blocks; a line longer than ``max_line_bytes`` is counted, never buffered whole."""
    number = 0  # lines yielded so far
    pending = b""  # the start of a line continuing in the next chunk (at most max_line_bytes)
    skipped = -1  # >= 0 while inside an oversized line: bytes dropped so far
    while chunk := stream.read(chunk_bytes):
        if skipped >= 0:
            cut = chunk.find(b"\n")
            if cut < 0:
                skipped += len(chunk)
                continue
            number += 1
            yield Block(number, None, skipped + cut, True)
            skipped = -1
            chunk = chunk[cut + 1 :]
        parts = (pending + chunk if pending else chunk).split(b"\n")
        pending = parts.pop()
        if parts and max(map(len, parts)) <= max_line_bytes:
            yield Block(number + 1, parts, 0, True)
            number += len(parts)
        elif parts:
            run: list[bytes] = []
            for data in parts:
                if len(data) <= max_line_bytes:
                    run.append(data)
                    continue
                if run:
                    yield Block(number + 1, run, 0, True)
                    number += len(run)
                    run = []
                number += 1
                yield Block(number, None, len(data), True)
            if run:
                yield Block(number + 1, run, 0, True)
                number += len(run)
        if len(pending) > max_line_bytes:
            skipped, pending = len(pending), b""
    if skipped >= 0:
        yield Block(number + 1, None, skipped, False)
    elif pending:
        yield Block(number + 1, [pending], 0, False)


def iter_lines(stream: Readable, *, max_line_bytes: int, chunk_bytes: int = CHUNK_BYTES) -> Iterator[Line]:
    """Yield the lines of ``stream`` one by one (see ``iter_line_blocks``)."""
    for first, lines, length, terminated in iter_line_blocks(
        stream, max_line_bytes=max_line_bytes, chunk_bytes=chunk_bytes
    ):
        if lines is None:
            yield Line(first, None, length, terminated)
            continue
        last = len(lines) - 1
        for offset, data in enumerate(lines):
            yield Line(first + offset, data, len(data), terminated or offset < last)
