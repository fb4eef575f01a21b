"""The documented row shape as a msgspec type: an ordinary row is checked while it is parsed, in C.

The row (README, "Starting a run") is ``{"id": str, "metadata": {"prompt": str | messages, "answer"?: str, "task"?: str,
"info"?: object}}``. ``decode_ordinary`` accepts only rows of that shape whose messages are exactly a known role and
a string content and whose info values are scalars or lists of scalars, so a row it returns passes every stateless
check of ``mtrl.validation.dataset`` but a blank id or prompt (``ordinary_keys``) and
holds nothing nested more than five levels. msgspec leaves out keys a TypedDict does not declare, and keeps the last
of two equal keys, so ``ordinary_keys`` also says how many keys the row's line must have written: a line that writes
more holds an unknown or a duplicate key, and is parsed again and checked one rule at a time. Every other row
(content parts, nested info, extra message keys, any error) takes that exact path too, with its exact messages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, NotRequired, TypedDict, get_args

import msgspec

MAX_ID_CHARS = 256
Role = Literal["system", "user", "assistant", "tool"]
ROLES = frozenset(get_args(Role))
Scalar = str | int | float | bool | None


class _Message(TypedDict):
    role: Role
    content: str


class _Metadata(TypedDict):
    prompt: Annotated[str, msgspec.Meta(min_length=1)] | Annotated[list[_Message], msgspec.Meta(min_length=1)]
    answer: NotRequired[str]
    task: NotRequired[str]
    info: NotRequired[dict[str, Scalar | list[Scalar]]]


class _Row(TypedDict):
    id: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID_CHARS)]  # (a blank one: ordinary_keys)
    metadata: _Metadata


decode_ordinary: Callable[[bytes], Any] = msgspec.json.Decoder(_Row).decode
_MESSAGE_KEYS = len(_Message.__annotations__)


def ordinary_keys(row: Any) -> int:
    """The number of keys a row ``decode_ordinary`` returned holds, or -1 when its id or string prompt is blank.

    (Blank is checked here: a msgspec ``pattern`` costs a regular-expression call per row, ``isspace`` far less.)
    """
    if row["id"].isspace():
        return -1
    metadata = row["metadata"]
    prompt = metadata["prompt"]
    if type(prompt) is str:
        if prompt.isspace():
            return -1
        keys = 2 + len(metadata)
    else:
        keys = 2 + len(metadata) + _MESSAGE_KEYS * len(prompt)
    info = metadata.get("info")
    return keys if info is None else keys + len(info)
