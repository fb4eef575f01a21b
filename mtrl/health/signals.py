"""The per-step signal rows of a run: ``runs/<run id>/signals.jsonl``.

The first line is a header ``{"planned_steps": N, "group_size": G}``; then one JSON object per training step,
in increasing ``step`` order, with the fields of ``SignalRow`` (null or absent when the backend cannot know
them). Every backend writes this file and every reader (``mtrl health``, the pipeline's status poll) reads it
with ``parse_signals``, so a backend only has to fill the fields it can.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

SIGNALS_FILE = "signals.jsonl"
HEALTH_FILE = "health.json"

# The numeric per-step fields (shares are in [0, 1]; the rest are any finite number).
SHARE_FIELDS = (
    "zero_spread_share",
    "malformed_share",
    "cap_hit_share",
    "error_share",
    "timeout_share",
    "truncation_share",
)
# Bounds on what a signals file may hold (any writer, any size): the rules compute means, spreads and ratios over
# these, so a finite extreme (1e308) would overflow to inf and NaN, and a step of hundreds of digits would not fit a
# float; a file past these sizes is refused, never read whole into a backend function's memory.
MAX_MAGNITUDE = 1e9
MAX_COUNT = 10**9
MAX_SIGNALS_BYTES = 16 * 1024 * 1024
MAX_SIGNAL_ROWS = 100_000

NUMBER_FIELDS = (
    "reward_mean",
    "reward_spread_mean",
    "evaluation_mean",
    "mean_turns",
    "entropy",
    "kl",
    "grad_norm",
    *SHARE_FIELDS,
)


class SignalsError(ValueError):
    """A signals file that cannot be read (the message names the line and the field)."""


@dataclass(frozen=True)
class SignalHeader:
    planned_steps: int
    group_size: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"planned_steps": self.planned_steps, "group_size": self.group_size}


@dataclass(frozen=True)
class SignalRow:
    """One training step. ``time`` is ISO 8601 (UTC) when the step finished."""

    step: int
    time: str | None = None
    reward_mean: float | None = None
    reward_spread_mean: float | None = None  # mean within-group standard deviation of the reward
    zero_spread_share: float | None = None  # share of groups whose reward is identical
    evaluation_mean: float | None = None  # held-out external evaluation, on the steps it is measured
    malformed_share: float | None = None  # episodes with >= 1 unparsable action or final answer
    mean_turns: float | None = None
    cap_hit_share: float | None = None  # episodes that hit the turn limit
    error_share: float | None = None  # reward/episode errors
    timeout_share: float | None = None
    truncation_share: float | None = None
    entropy: float | None = None
    kl: float | None = None
    grad_norm: float | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def value(self, name: str) -> float | None:
        found: float | None = getattr(self, name)
        return found

    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {"step": self.step}
        for item in fields(self):
            if item.name in {"step", "extra"}:
                continue
            value = getattr(self, item.name)
            if value is not None:
                document[item.name] = value
        # What a writer adds beyond the schema (e.g. the window a serverless row's episode figures cover) is kept.
        document.update({key: value for key, value in self.extra.items() if key not in document})
        return document


@dataclass(frozen=True)
class Signals:
    header: SignalHeader
    rows: tuple[SignalRow, ...]
    truncated_tail: bool = False  # the last line was partially written and left out

    @property
    def last_step(self) -> int:
        return self.rows[-1].step if self.rows else 0


def parse_time(value: str, where: str = "time") -> datetime:
    """An ISO 8601 time (``Z`` accepted; a time without zone is taken as UTC)."""
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise SignalsError(f"{where}: 'time' is not ISO 8601: {value[:40]!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def iso_time(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z")


def _number(value: Any, name: str, where: str, *, share: bool) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SignalsError(f"{where}: '{name}' must be a number or null, not {json.dumps(value)[:40]}")
    number = float(value)
    if not math.isfinite(number):
        raise SignalsError(f"{where}: '{name}' is not finite ({value!r})")
    if abs(number) > MAX_MAGNITUDE:
        raise SignalsError(f"{where}: '{name}' is outside ±{MAX_MAGNITUDE:g} ({number:g})")
    if share and not 0.0 <= number <= 1.0:
        raise SignalsError(f"{where}: '{name}' is a share and must be within [0, 1], not {number}")
    return number


def _count(value: Any, name: str, where: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_COUNT:
        shown = json.dumps(value)[:40] if not isinstance(value, int) or value.bit_length() < 64 else "a huge integer"
        raise SignalsError(f"{where}: '{name}' must be an integer in [{minimum}, {MAX_COUNT}], not {shown}")
    return value


def header_from(document: Mapping[str, Any], where: str = "header") -> SignalHeader:
    if "planned_steps" not in document:
        raise SignalsError(f'{where}: the first line must be the header {{"planned_steps": N, "group_size": G}}')
    group = document.get("group_size")
    return SignalHeader(
        planned_steps=_count(document["planned_steps"], "planned_steps", where, minimum=0),
        group_size=None if group is None else _count(group, "group_size", where, minimum=1),
    )


def row_from(document: Mapping[str, Any], where: str = "row") -> SignalRow:
    """A validated row (unknown fields are kept in ``extra``, so newer writers stay readable)."""
    if "step" not in document:
        raise SignalsError(f"{where}: a row needs 'step'")
    step = _count(document["step"], "step", where, minimum=1)
    time = document.get("time")
    if time is not None and not isinstance(time, str):
        raise SignalsError(f"{where}: 'time' must be an ISO 8601 string or null")
    if time is not None:
        parse_time(time, where)
    values = {name: _number(document.get(name), name, where, share=name in SHARE_FIELDS) for name in NUMBER_FIELDS}
    known = {"step", "time", *NUMBER_FIELDS}
    extra = {key: value for key, value in document.items() if key not in known}
    return SignalRow(step=step, time=time, extra=extra, **values)


def parse_signals(text: str, *, source: str = "signals.jsonl") -> Signals:
    """Read a signals file. A last line without its newline that does not parse is a write in progress: it is
    left out (``truncated_tail``). Any other bad line is an error naming the line."""
    if len(text) > MAX_SIGNALS_BYTES:
        raise SignalsError(f"{source}: larger than {MAX_SIGNALS_BYTES // (1024 * 1024)} MiB; not read")
    lines = text.split("\n")
    if len(lines) > MAX_SIGNAL_ROWS + 2:
        raise SignalsError(f"{source}: more than {MAX_SIGNAL_ROWS} rows; not read")
    complete_tail = text.endswith("\n")
    truncated = False
    header: SignalHeader | None = None
    rows: list[SignalRow] = []
    for index, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        is_tail = index == len(lines) and not complete_tail
        try:
            document = json.loads(line)
        except json.JSONDecodeError as error:
            if is_tail:
                truncated = True
                break
            raise SignalsError(f"{source} line {index}: not JSON ({error.msg})") from None
        if not isinstance(document, dict):
            raise SignalsError(f"{source} line {index}: each line must be a JSON object")
        where = f"{source} line {index}"
        if header is None:
            header = header_from(document, where)
            continue
        row = row_from(document, where)
        if rows and row.step <= rows[-1].step:
            raise SignalsError(f"{where}: step {row.step} does not follow step {rows[-1].step} (steps must increase)")
        rows.append(row)
    if header is None:
        raise SignalsError(f'{source}: empty; the first line must be the header {{"planned_steps": N, ...}}')
    return Signals(header=header, rows=tuple(rows), truncated_tail=truncated)


def standard_json(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None, so ``json.dumps(..., allow_nan=False)`` writes
    standard JSON (RFC 8259 has no NaN or Infinity) whatever arithmetic produced it."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: standard_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [standard_json(item) for item in value]
    return value


def render_signals(header: SignalHeader, rows: Iterable[SignalRow]) -> str:
    """The file text: the header line, then one line per row (every line ends with a newline)."""
    lines = [json.dumps(header.to_dict(), separators=(",", ":"))]
    lines += [json.dumps(row.to_dict(), separators=(",", ":")) for row in rows]
    return "\n".join(lines) + "\n"
