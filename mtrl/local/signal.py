"""Per-component signal health of one GRPO step (DESIGN.md §5)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mtrl.envs.contract import EpisodeResult


def signal_health(groups: Sequence[Sequence[EpisodeResult]]) -> dict[str, dict[str, Any]]:
    """For the aggregate reward and each component: mean within-group spread and share of zero-spread groups."""
    names = ["reward", *sorted({name for group in groups for r in group for name in r.components})]
    health: dict[str, dict[str, Any]] = {}
    for name in names:
        spreads = []
        for group in groups:
            values = np.array([r.reward if name == "reward" else r.components.get(name, 0.0) for r in group])
            spreads.append(float(values.std()))
        zero = sum(1 for spread in spreads if spread < 1e-9)
        health[name] = {
            "mean_spread": float(np.mean(spreads)) if spreads else 0.0,
            "zero_spread_share": zero / len(spreads) if spreads else 1.0,
        }
    return health
