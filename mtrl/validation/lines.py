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


def iter_lines(stream: Readable, *, max_line_bytes: int, chunk_bytes: int = CHUNK_BYTES) -> Iterator[Line]:
    """Yield the lines of ``stream``; a line longer than ``max_line_bytes`` is counted, never buffered whole."""
    number = 0
    pending = b""  # the start of a line continuing in the next chunk (at most max_line_bytes)
    skipped = -1  # >= 0 while inside an oversized line: bytes dropped so far
    while chunk := stream.read(chunk_bytes):
        if skipped >= 0:
            cut = chunk.find(b"\n")
            if cut < 0:
                skipped += len(chunk)
                continue
            number += 1
            yield Line(number, None, skipped + cut, True)
            skipped = -1
            chunk = chunk[cut + 1 :]
        parts = (pending + chunk if pending else chunk).split(b"\n")
        pending = parts.pop()
        for data in parts:
            number += 1
            if len(data) > max_line_bytes:
                yield Line(number, None, len(data), True)
            else:
                yield Line(number, data, len(data), True)
        if len(pending) > max_line_bytes:
            skipped, pending = len(pending), b""
    if skipped >= 0:
        yield Line(number + 1, None, skipped, False)
    elif pending:
        yield Line(number + 1, pending, len(pending), False)
