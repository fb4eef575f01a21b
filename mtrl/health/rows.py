"""The one builder of signal rows (``mtrl.health.signals``): every backend turns what it saw of a step into a
``SignalRow`` here, and supplies only its source.

- the local trainers (``mtrl.local.signals``): their step records and held-out evaluations;
- serverless and hyperpod (``mtrl.backends.episode_rows``): the lines ``mtrl.health.emf`` published, read back;
- verl (``mtrl.backends.verl``): its console metrics, and its rollout dump as scored episodes.

A step's scored episodes, grouped by task (GRPO's groups: the within-group spread needs them), become a row through
``episode_row`` (the figures of ``mtrl.health.episodes.episode_fields``, plus the truncation share when the episodes
know it); figures a source reports by name go through ``signal_row``. Either way a value that is not a finite number
is unknown (null: a NaN would make the file unreadable), names that are not row fields are left out, and shares are
held within [0, 1] (a mean of shares summed in floating point may stray past by an ulp).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from mtrl.health.episodes import ScoredEpisode, episode_fields
from mtrl.health.signals import NUMBER_FIELDS, SHARE_FIELDS, SignalRow


@runtime_checkable
class TruncatedEpisode(Protocol):
    """An episode that also says whether the policy's response was cut off at its length limit (verl's do)."""

    @property
    def truncated(self) -> bool: ...


def row_value(name: str, value: Any) -> float | None:
    """``value`` as the row field ``name`` holds it: a finite number (a share within [0, 1]), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    number = float(value)
    return min(1.0, max(0.0, number)) if name in SHARE_FIELDS else number


def signal_row(
    step: int,
    figures: Mapping[str, Any],
    *,
    time: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> SignalRow:
    """The row of ``step`` from figures named as the row's fields (absent, unknown: null); ``extra`` is what the
    writer adds beyond the schema."""
    values = {name: row_value(name, figures.get(name)) for name in NUMBER_FIELDS}
    return SignalRow(step=step, time=time, extra=dict(extra or {}), **values)


def step_figures(groups: Sequence[Sequence[ScoredEpisode]]) -> dict[str, float | None]:
    """The row figures of one step's scored episodes, grouped by task: ``episode_fields``, and ``truncation_share``
    when every episode says whether it was truncated."""
    figures = episode_fields(groups)
    episodes = [episode for group in groups for episode in group]
    truncated = [episode.truncated for episode in episodes if isinstance(episode, TruncatedEpisode)]
    if episodes and len(truncated) == len(episodes):
        figures["truncation_share"] = sum(truncated) / len(truncated)
    return figures


def episode_row(step: int, groups: Sequence[Sequence[ScoredEpisode]], *, time: str | None = None) -> SignalRow:
    """The row of ``step`` from its scored episodes, grouped by task."""
    return signal_row(step, step_figures(groups), time=time)


def merged(row: SignalRow, other: SignalRow) -> SignalRow:
    """``row`` with ``other``'s figures where it has none: one step measured by two sources, ``row``'s win."""
    figures = {name: other.value(name) if row.value(name) is None else row.value(name) for name in NUMBER_FIELDS}
    return signal_row(row.step, figures, time=row.time, extra=row.extra)
