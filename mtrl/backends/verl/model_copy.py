"""A model copy's ``SHA256SUMS``: the list of its files and their SHA-256, in ``sha256sum``'s own format.

``sha256sum`` writes ``<64 hex digits><space><mode><name>``, the mode a space (text) or ``*`` (binary) (GNU
coreutils, "sha256sum invocation" / "md5sum invocation": "a space, a character indicating input mode ('*' for
binary, ' ' for text or where binary is insignificant), and name"). Every name is a path the trainer will write
under the model directory, so it must stay inside it: relative, no ``..`` or ``.`` part, no empty part, no
backslash or control character — checked after the mode character is taken off, never before.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

_LINE = re.compile(r"^(?P<digest>[0-9a-fA-F]{64}) (?P<mode>[ *])(?P<name>.+)$")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f\\]")


def parse_sums(text: str) -> dict[str, str]:
    """``{relative name: lowercase digest}`` of a SHA256SUMS file; ValueError naming the first bad line."""
    files: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        matched = _LINE.match(line)
        if matched is None:
            raise ValueError(f"line {number} is not '<sha256>  <name>' or '<sha256> *<name>': {line!r}")
        name = matched["name"]
        problem = _name_problem(name)
        if problem:
            raise ValueError(f"line {number}: file name {name!r} {problem}")
        if name in files:
            raise ValueError(f"line {number}: file name {name!r} is listed twice")
        files[name] = matched["digest"].lower()
    if not files:
        raise ValueError("it lists no file")
    return files


def _name_problem(name: str) -> str | None:
    if _UNSAFE.search(name):
        return "has a backslash or a control character"
    if name.startswith("/"):
        return "is absolute"
    parts = name.split("/")
    if any(part in {"", ".", ".."} for part in parts):
        return "has an empty, '.' or '..' part"
    if PurePosixPath(name).is_absolute():
        return "is absolute"
    return None
