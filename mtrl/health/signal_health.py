"""Reward-signal health: does each reward component still separate the rollouts of one group?

GRPO learns only from differences between the rollouts of the same task (a group): advantages are
rewards normalised within the group. A component that is constant inside every group contributes
nothing to the gradient, however large its weight. So for the aggregate reward and each component we
measure the within-group spread (population standard deviation, averaged over groups) and the share of
groups whose spread is zero. Workers publish these as CloudWatch metrics in the embedded metric format
(EMF: one JSON log line per component); the local backend and tests call ``compute`` directly.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

from mtrl.health import emf_document as emf

AGGREGATE = "reward"
ZERO_SPREAD_EPSILON = 1e-9
# The one threshold: a component is "flat" when it is constant inside at least this share of groups. The library's
# warnings, `mtrl env try`'s verdict and exit code, the demo and docs/extending.md all use it through `verdict`.
FLAT_WARNING_SHARE = 0.9
# The column headings every report uses for these figures (the demo, `env try` with either policy).
SPREAD_HEADING = "mean spread"
ZERO_SPREAD_HEADING = "zero-spread groups"
FLAT = "flat"
SIGNAL = "signal"
EMF_NAMESPACE = "mtrl/RewardSignal"
COMPONENT_DIMENSION = "Component"
SPREAD_METRIC = "WithinGroupSpread"
ZERO_SPREAD_METRIC = "ZeroSpreadShare"


class _Scored(Protocol):
    @property
    def reward(self) -> float: ...

    @property
    def components(self) -> Mapping[str, float]: ...


Episode = _Scored | Mapping[str, Any]


@dataclass(frozen=True)
class ComponentHealth:
    name: str
    groups: int  # groups with at least two episodes reporting this component
    mean: float  # mean value over those episodes
    mean_spread: float  # mean within-group standard deviation
    zero_spread_share: float  # share of groups in which every episode had the same value

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "groups": self.groups,
            "mean": self.mean,
            "mean_spread": self.mean_spread,
            "zero_spread_share": self.zero_spread_share,
        }


@dataclass(frozen=True)
class SignalHealth:
    groups: int
    episodes: int
    skipped_groups: int  # groups of a single episode: spread is undefined, so they are left out
    aggregate: ComponentHealth
    components: dict[str, ComponentHealth] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "groups": self.groups,
            "episodes": self.episodes,
            "skipped_groups": self.skipped_groups,
            "aggregate": self.aggregate.to_dict(),
            "components": {name: health.to_dict() for name, health in self.components.items()},
            "warnings": list(self.warnings),
        }


def _values(episode: Episode) -> tuple[float, Mapping[str, float]]:
    if isinstance(episode, Mapping):
        if "reward" not in episode:
            raise ValueError("episode has no 'reward'")
        return float(episode["reward"]), episode.get("components") or {}
    return float(episode.reward), episode.components


def _std(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def _health(name: str, groups: list[list[float]]) -> ComponentHealth:
    usable = [values for values in groups if len(values) >= 2]
    if not usable:
        return ComponentHealth(name=name, groups=0, mean=0.0, mean_spread=0.0, zero_spread_share=0.0)
    spreads = [_std(values) for values in usable]
    flat = sum(1 for spread in spreads if spread <= ZERO_SPREAD_EPSILON)
    every = [v for values in usable for v in values]
    return ComponentHealth(
        name=name,
        groups=len(usable),
        mean=sum(every) / len(every),
        mean_spread=sum(spreads) / len(spreads),
        zero_spread_share=flat / len(usable),
    )


def compute(groups: Iterable[Sequence[Episode]]) -> SignalHealth:
    """Signal health over groups of episodes (each group: several rollouts of one task).

    An episode is an ``EpisodeResult`` (anything with ``reward`` and ``components``) or a mapping with
    ``reward`` and optional ``components``. Raises ``ValueError`` on a non-finite value.
    """
    aggregate: list[list[float]] = []
    per_component: dict[str, list[list[float]]] = {}
    episodes = skipped = total_groups = 0
    for group in groups:
        total_groups += 1
        episodes += len(group)
        if len(group) < 2:
            skipped += 1
            continue
        rewards: list[float] = []
        columns: dict[str, list[float]] = {}
        for episode in group:
            reward, values_by_name = _values(episode)
            if not math.isfinite(reward):
                raise ValueError(f"non-finite reward {reward!r}")
            rewards.append(reward)
            for name, value in values_by_name.items():
                number = float(value)
                if not math.isfinite(number):
                    raise ValueError(f"component '{name}' has a non-finite value {value!r}")
                columns.setdefault(name, []).append(number)
        aggregate.append(rewards)
        for name, values in columns.items():
            per_component.setdefault(name, []).append(values)
    health = {name: _health(name, values) for name, values in sorted(per_component.items())}
    report = SignalHealth(
        groups=total_groups,
        episodes=episodes,
        skipped_groups=skipped,
        aggregate=_health(AGGREGATE, aggregate),
        components=health,
    )
    report.warnings.extend(_warnings(report))
    return report


def is_flat(zero_spread_share: float, groups: int = 1) -> bool:
    """The one verdict rule: flat when no group could be measured or the zero-spread share reaches the threshold."""
    return groups == 0 or zero_spread_share >= FLAT_WARNING_SHARE


def verdict(zero_spread_share: float, groups: int = 1) -> str:
    """``"flat"`` (GRPO gets almost no gradient from it) or ``"signal"``; see ``is_flat``."""
    return FLAT if is_flat(zero_spread_share, groups) else SIGNAL


def explain_flat(name: str, zero_spread_share: float) -> str:
    """What a flat component means for GRPO, in plain words."""
    return (
        f"'{name}' is the same for every rollout of a task in {zero_spread_share:.0%} of groups: GRPO's advantage "
        "is the reward minus its group's mean, so there it adds nothing to the gradient whatever its weight. "
        "Make it graded (partial credit), or use tasks on which this policy sometimes succeeds and sometimes fails."
    )


def _warnings(report: SignalHealth) -> list[str]:
    found: list[str] = []
    if report.aggregate.groups == 0:
        found.append("no group has two or more episodes: within-group spread cannot be measured")
        return found
    for health in [report.aggregate, *report.components.values()]:
        if health.groups and is_flat(health.zero_spread_share, health.groups):
            found.append(
                f"'{health.name}' is constant within {health.zero_spread_share:.0%} of groups: "
                "it gives GRPO almost no learning signal"
            )
    return found


def _dimension_values(dimensions: Mapping[str, str]) -> dict[str, str]:
    if len(dimensions) > 29:  # EMF allows 30 dimensions per set; one is taken by Component
        raise ValueError("at most 29 dimensions")
    bad = [key for key, value in dimensions.items() if not key or not isinstance(value, str) or not value]
    if bad:
        raise ValueError(f"dimension values must be non-empty strings: {bad}")
    return dict(dimensions)


def to_emf(
    report: SignalHealth,
    *,
    dimensions: Mapping[str, str],
    namespace: str = EMF_NAMESPACE,
    timestamp_ms: int | None = None,
) -> list[dict[str, Any]]:
    """CloudWatch embedded-metric-format documents, one per component (dimension ``Component``)."""
    base = _dimension_values(dimensions)
    stamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    return [
        emf.document(
            namespace=namespace,
            dimensions={**base, COMPONENT_DIMENSION: health.name},
            metrics=[
                (SPREAD_METRIC, health.mean_spread, "None"),
                (ZERO_SPREAD_METRIC, health.zero_spread_share, "None"),
                ("ComponentMean", health.mean, "None"),
                ("Groups", health.groups, "Count"),
            ],
            timestamp_ms=stamp,
        )
        for health in [report.aggregate, *report.components.values()]
        if health.groups > 0
    ]


def emit_emf(
    report: SignalHealth, *, dimensions: Mapping[str, str], stream: TextIO | None = None, **kwargs: Any
) -> int:
    """Write the EMF documents as JSON lines (stdout by default, which ECS ships to CloudWatch Logs)."""
    return emf.write(to_emf(report, dimensions=dimensions, **kwargs), stream)
