"""The episode's deadline, shared by the episode driver and the sandbox: a run never outlives its episode.

``Limits.timeout_s`` is one execution's own bound; an episode has its own, shorter or not, and a program that starts
two seconds before the episode's end must not run its full ``timeout_s`` past it. The episode driver
(``mtrl.envs.rollout``) plays each ``step`` inside ``episode_deadline(seconds_left)``; every sandbox run started in
that block (``run_cases``, ``run_code``, whatever environment code calls them) stops at the earlier of its own timeout
and the episode's end, and reports a timeout. A context variable: concurrent episodes (threads, asyncio tasks) each
see their own.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from contextvars import ContextVar

_DEADLINE: ContextVar[float] = ContextVar("mtrl_sandbox_episode_deadline", default=math.inf)


@contextlib.contextmanager
def episode_deadline(seconds_left: float | None) -> Iterator[None]:
    """Sandbox runs started in this block end within ``seconds_left`` (None: no episode deadline)."""
    if seconds_left is None:
        yield
        return
    # A nested block never extends an outer one.
    token = _DEADLINE.set(min(_DEADLINE.get(), time.monotonic() + max(0.0, seconds_left)))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def bounded(started: float, timeout_s: float) -> float:
    """The monotonic time a run started at ``started`` must end: its own timeout or the episode's end, if sooner."""
    return min(started + timeout_s, _DEADLINE.get())
