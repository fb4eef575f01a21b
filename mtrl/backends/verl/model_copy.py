"""A model copy's ``SHA256SUMS``: the list of its files and their SHA-256, in ``sha256sum``'s own format.

``sha256sum`` writes ``<64 hex digits><space><mode><name>``, the mode a space (text) or ``*`` (binary) (GNU
coreutils, "sha256sum invocation" / "md5sum invocation": "a space, a character indicating input mode ('*' for
binary, ' ' for text or where binary is insignificant), and name"). Every name is a path the trainer will write
under the model directory, so it must stay inside it: relative, no ``..`` or ``.`` part, no empty part, no
backslash or control character, and none of the other characters Python's ``str.splitlines`` ends a line at
(``\\x85``, ``\\u2028``, ``\\u2029``: Python docs, "str.splitlines"), which would split one written line into two when
the list is read back — checked after the mode character is taken off, never before.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from mtrl.backends.verl.supply import MODELS_PREFIX
from mtrl.contracts.hub import MODEL_SUMS_FILE

# "The object key name is a sequence of Unicode characters with UTF-8 encoding of up to 1,024 bytes long" (Amazon S3
# User Guide, "Naming Amazon S3 objects").
MAX_KEY_BYTES = 1024

_LINE = re.compile(r"^(?P<digest>[0-9a-fA-F]{64}) (?P<mode>[ *])(?P<name>.+)$")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029\\]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


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
        problem = name_problem(name)
        if problem:
            raise ValueError(f"line {number}: file name {name!r} {problem}")
        if name in files:
            raise ValueError(f"line {number}: file name {name!r} is listed twice")
        files[name] = matched["digest"].lower()
    if not files:
        raise ValueError("it lists no file")
    return files


def name_problem(name: str) -> str | None:
    """Why ``name`` may not be a file of a model copy (None when it may)."""
    if _SURROGATE.search(name):  # a file name's bytes that are not UTF-8 (os.fsdecode's surrogateescape)
        return "is not valid UTF-8 (neither an S3 key nor a SHA256SUMS line can hold it): rename the file"
    if _UNSAFE.search(name):
        return "has a backslash, a control character or a line separator"
    if name.startswith("/"):
        return "is absolute"
    parts = name.split("/")
    if any(part in {"", ".", ".."} for part in parts):
        return "has an empty, '.' or '..' part"
    if PurePosixPath(name).is_absolute():
        return "is absolute"
    return None


_CHUNK = 8 * 1024 * 1024


def too_long_for_s3(model_id: str, revision: str, names: list[str]) -> str | None:
    """The first name whose key ``models/<id>/<revision>/<name>`` S3 could not hold (None when all fit): found before
    any upload or download, not midway."""
    for name in names:
        key = f"{MODELS_PREFIX}{model_id}/{revision}/{name}"
        if len(key.encode("utf-8")) > MAX_KEY_BYTES:
            return f"file name {name[:60]!r}… makes the key {len(key.encode('utf-8'))} bytes, over S3's {MAX_KEY_BYTES}"
    return None


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def format_sums(files: Mapping[str, str]) -> str:
    """The SHA256SUMS text of ``{name: digest}``, as ``sha256sum`` writes it (text mode, sorted by name) and
    ``parse_sums`` reads it back; ValueError for a name the trainer could not write."""
    for name in files:
        problem = name_problem(name)
        if problem:
            raise ValueError(f"file name {name!r} {problem}")
    text = "".join(f"{files[name]}  {name}\n" for name in sorted(files))
    parse_sums(text)  # one format: what is written is what the trainer reads
    return text


def tree_sums(directory: Path) -> dict[str, str]:
    """``{relative name: digest}`` of every regular file under ``directory`` but its own SHA256SUMS; ValueError for a
    symbolic link (a copy holds files, never links out of it), anything else that is not a regular file or a
    directory (a FIFO, socket or device: left out silently, the copy would lack a file the operator sees) or a name
    the trainer could not write."""
    files: dict[str, str] = {}
    for path in sorted(directory.rglob("*")):
        name = path.relative_to(directory).as_posix()
        if path.is_symlink():
            raise ValueError(f"{name} is a symbolic link: copy the files it points to")
        if path.is_dir():
            continue
        if not path.is_file():
            raise ValueError(f"{name} is not a regular file (a FIFO, socket or device): remove it from the copy")
        if name == MODEL_SUMS_FILE:
            continue
        problem = name_problem(name)
        if problem:
            raise ValueError(f"file name {name!r} {problem}")
        files[name] = file_sha256(path)
    if not files:
        raise ValueError(f"{directory} holds no file")
    return files
