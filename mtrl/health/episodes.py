"""The environment-side fields of a signal row, from the groups of scored episodes of one training step.

Whoever scores episodes (the local trainer, the episode driver, the reward workers) passes each episode as an
object satisfying ``ScoredEpisode``; ``episode_fields`` turns one step's groups into the row fields it can know.
The within-group spread is ``mtrl.health.signal_health``'s, so the row and the ``mtrl/RewardSignal`` metrics agree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from mtrl.contracts.environment import MALFORMED_ACTIONS, EpisodeResult
from mtrl.health.evaluation import score as evaluation_score
from mtrl.health.signal_health import compute as compute_signal_health

MALFORMED_METRIC = MALFORMED_ACTIONS  # EpisodeResult.metrics convention: unparsable actions or answers
EpisodeStatus = Literal["completed", "timeout", "error"]


class ScoredEpisode(Protocol):
    """One episode as the aggregation sees it: its result (None when it errored or timed out before scoring),
    how it ended, how many turns it took and whether it was cut off by the turn limit."""

    @property
    def result(self) -> EpisodeResult | None: ...

    @property
    def status(self) -> EpisodeStatus: ...

    @property
    def turns(self) -> int: ...

    @property
    def hit_turn_limit(self) -> bool: ...


def _share(count: int, total: int) -> float | None:
    return count / total if total else None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def is_malformed(result: EpisodeResult) -> bool:
    value = result.metrics.get(MALFORMED_METRIC, 0.0)
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def episode_fields(groups: Sequence[Sequence[ScoredEpisode]]) -> dict[str, Any]:
    """``reward_mean``, ``reward_spread_mean``, ``zero_spread_share``, ``evaluation_mean``, ``malformed_share``,
    ``mean_turns``, ``cap_hit_share``, ``error_share``, ``timeout_share`` of one step (None when not measurable).

    Reward figures use only the scored episodes; the shares of errors, timeouts and turn-limit hits are over
    every episode. The within-group spread skips groups with fewer than two scored episodes."""
    episodes = [episode for group in groups for episode in group]
    scored = [episode.result for episode in episodes if episode.result is not None]
    spread: dict[str, Any] = {"reward_spread_mean": None, "zero_spread_share": None}
    scored_groups = [[e.result for e in group if e.result is not None] for group in groups]
    health = compute_signal_health(scored_groups)
    if health.aggregate.groups:
        spread = {
            "reward_spread_mean": health.aggregate.mean_spread,
            "zero_spread_share": health.aggregate.zero_spread_share,
        }
    return {
        "reward_mean": _mean([r.reward for r in scored]),
        **spread,
        "evaluation_mean": _mean([evaluation_score(r) for r in scored]),
        "malformed_share": _share(sum(1 for r in scored if is_malformed(r)), len(scored)),
        "mean_turns": _mean([float(e.turns) for e in episodes]),
        "cap_hit_share": _share(sum(1 for e in episodes if e.hit_turn_limit), len(episodes)),
        "error_share": _share(sum(1 for e in episodes if e.status == "error"), len(episodes)),
        "timeout_share": _share(sum(1 for e in episodes if e.status == "timeout"), len(episodes)),
    }
