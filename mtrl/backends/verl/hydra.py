"""Hydra override values that Hydra reads back as exactly what mtrl meant.

verl's trainer (``verl.trainer.main_ppo``) takes its configuration as Hydra overrides (``key=value``), and Hydra's
override grammar gives a value meaning: ``${…}`` interpolates (``${oc.env:NAME}`` reads the process environment),
``[…]`` and ``{…}`` build lists and mappings (a ``_target_`` mapping is instantiated by verl's config validation),
quotes, commas and escapes change what the value is. So every value is rendered from a typed Python value, and a
string is passed only when it is a plain word the grammar reads as itself; anything else is refused, never quoted.
"""

from __future__ import annotations

import math
import re
from typing import Any

# A string Hydra's override grammar reads as itself: no interpolation (``$``, braces), quote, list or dict syntax,
# separator, escape or whitespace; and not a word the grammar turns into another type (null, true, nan, a number).
_PLAIN_STRING = re.compile(r"^[A-Za-z0-9_./@+-]+(:[A-Za-z0-9_./@+-]+)*$")
_GRAMMAR_WORDS = frozenset({"null", "true", "false", "nan", "inf", "-inf", "+inf"})


def hydra_value(value: Any) -> str:
    """One override value, rendered so Hydra parses it back to exactly ``value``; ValueError for anything else."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"override value {value!r} is not finite")
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(item) for item in value) + "]"
    if isinstance(value, str):
        if not _PLAIN_STRING.match(value) or value.lower() in _GRAMMAR_WORDS or _is_number(value):
            raise ValueError(f"override value {value!r} is not a plain string Hydra reads as itself")
        return value
    raise ValueError(f"override value {value!r} is a {type(value).__name__}, not a number, bool, string or list")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
