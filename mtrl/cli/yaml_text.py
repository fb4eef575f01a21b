"""Kubernetes objects as YAML text (what `helm template` prints), without a YAML library.

Only what JSON-shaped objects need: mappings, lists, strings, numbers, booleans and null. Strings are written as
ASCII JSON strings (valid YAML double-quoted scalars), multi-line printable ones as literal blocks, so the text reads
back to the same objects.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")
_WORDS = {"true", "false", "null", "yes", "no", "on", "off", "y", "n"}  # YAML 1.1 reads these as booleans/null
_BLOCK_TEXT = re.compile(r"^[\x21-\x7e][\x20-\x7e\n]*$")  # printable ASCII lines, the first not indented


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x7F:
        return char
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _quoted(text: str) -> str:
    # JSON escapes for control characters, YAML's \u/\U escapes for the rest (JSON's surrogate pairs are not YAML).
    return "".join(_escape(char) for char in json.dumps(text, ensure_ascii=False))


def _key(key: str) -> str:
    return key if _PLAIN_KEY.fullmatch(key) and key.lower() not in _WORDS else _quoted(key)


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = json.dumps(value)
        # YAML 1.1 readers (PyYAML) take 1e+16 for a string: a float needs its dot.
        return text.replace("e", ".0e", 1) if "e" in text and "." not in text else text
    return _quoted(str(value))


def _lines(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    if isinstance(value, Mapping):
        if not value:
            return [pad + "{}"]
        lines = []
        for key, item in value.items():
            lines += _entry(pad + _key(str(key)) + ":", item, indent)
        return lines
    if isinstance(value, list):
        if not value:
            return [pad + "[]"]
        lines = []
        for item in value:
            nested = _lines(item, indent + 2)
            lines.append(pad + "- " + nested[0].lstrip())
            lines += nested[1:]
        return lines
    return [pad + _scalar(value)]


def _is_block(item: Any) -> bool:
    return (
        isinstance(item, str)
        and "\n" in item.rstrip("\n")
        and not item.endswith("\n\n")
        and _BLOCK_TEXT.fullmatch(item) is not None
        and not any(line.endswith(" ") for line in item.split("\n"))
    )


def _entry(head: str, item: Any, indent: int) -> list[str]:
    if _is_block(item):
        # A literal block (the ConfigMap's run.json reads as it will be mounted); "|" keeps one final newline.
        chomp = "|" if item.endswith("\n") else "|-"
        block = item.removesuffix("\n").split("\n")
        return [f"{head} {chomp}", *(" " * (indent + 2) + line if line else "" for line in block)]
    if isinstance(item, Mapping | list) and item:
        return [head, *_lines(item, indent + 2)]
    return [f"{head} {_lines(item, 0)[0]}"]


def dump_documents(documents: Iterable[Any]) -> str:
    """``---``-separated YAML documents."""
    return "".join("---\n" + "\n".join(_lines(document, 0)) + "\n" for document in documents)
