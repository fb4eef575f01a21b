"""The one writer of environment-side metrics (CloudWatch EMF lines), for every driver that scores episodes.

The reward workers, the serverless agent, the local backend and the verl agent loop publish what their episodes
showed through ``EpisodeMetrics.publish``: the within-group spread per component (``mtrl/RewardSignal``,
``mtrl.health.signal_health``), the external evaluation beside the reward (``mtrl/Evaluation``,
``mtrl.health.evaluation``) and
the episode figures a training-health row holds (``mtrl/Episodes``: reward mean, malformed actions, turn-limit hits,
mean turns, errors, timeouts; ``mtrl.health.episodes``), all with the same dimensions. A group of one episode (the
serverless agent plays one per invocation) has no spread; its other figures are still published (the serverless
and hyperpod backends read them back into their signal rows: ``ROW_FIELD_METRICS`` says where each row field is).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from mtrl.health import emf_document as emf
from mtrl.health import evaluation, signal_health
from mtrl.health.episodes import ScoredEpisode, episode_fields

EPISODES_NAMESPACE = "mtrl/Episodes"
# The serverless agent serves every run of its environment: it adds the job's name under this dimension, and the
# serverless backend reads that job's series back into its signal rows.
JOB_DIMENSION = "Job"
# signal-row field → EMF metric name
EPISODE_METRICS = {
    "reward_mean": "RewardMean",
    "malformed_share": "MalformedShare",
    "cap_hit_share": "CapHitShare",
    "mean_turns": "MeanTurns",
    "error_share": "ErrorShare",
    "timeout_share": "TimeoutShare",
}
EPISODE_COUNT_METRIC = "Episodes"
# signal-row field → (namespace, metric name, the line's dimensions beyond ``all_dimensions``): where the lines of
# ``publish`` carry each figure of a row, for a backend that reads them back (each line's value is its groups' mean)
ROW_FIELD_METRICS: dict[str, tuple[str, str, dict[str, str]]] = {
    **{field: (EPISODES_NAMESPACE, metric, {}) for field, metric in EPISODE_METRICS.items()},
    "reward_spread_mean": (
        signal_health.EMF_NAMESPACE,
        signal_health.SPREAD_METRIC,
        {signal_health.COMPONENT_DIMENSION: signal_health.AGGREGATE},
    ),
    "zero_spread_share": (
        signal_health.EMF_NAMESPACE,
        signal_health.ZERO_SPREAD_METRIC,
        {signal_health.COMPONENT_DIMENSION: signal_health.AGGREGATE},
    ),
}


@dataclass
class EpisodeMetrics:
    """Publishes groups of scored episodes of one environment; ``dimensions`` are added to ``Environment``."""

    env_id: str
    dimensions: Mapping[str, str] = field(default_factory=dict)
    stream: TextIO | None = None
    warnings: list[str] = field(default_factory=list)  # the signal-health warnings of the last publish

    @property
    def all_dimensions(self) -> dict[str, str]:
        return {"Environment": self.env_id, **dict(self.dimensions)}

    def publish(self, groups: Sequence[Sequence[ScoredEpisode]], *, timestamp_ms: int | None = None) -> int:
        """Write the EMF lines for these groups; returns how many lines were written."""
        episodes = [episode for group in groups for episode in group]
        if not episodes:
            return 0
        out = self.stream or sys.stdout
        dimensions = self.all_dimensions
        written = 0
        scored_groups = [[e.result for e in group if e.result is not None] for group in groups]
        spread_groups = [group for group in scored_groups if len(group) >= 2]
        self.warnings = []
        if spread_groups:
            report = signal_health.compute(spread_groups)
            written += signal_health.emit_emf(report, dimensions=dimensions, stream=out)
            self.warnings = list(report.warnings)
        results = [result for group in scored_groups for result in group]
        written += int(evaluation.emit_emf(results, dimensions=dimensions, stream=out, timestamp_ms=timestamp_ms))
        written += self._episode_line(episode_fields(groups), len(episodes), out, timestamp_ms)
        return written

    def _episode_line(self, fields: Mapping[str, float | None], episodes: int, out: TextIO, when: int | None) -> int:
        values: list[emf.Metric] = [
            (name, fields[key], "None") for key, name in EPISODE_METRICS.items() if fields.get(key) is not None
        ]
        line = emf.document(
            namespace=EPISODES_NAMESPACE,
            dimensions=self.all_dimensions,
            metrics=[*values, (EPISODE_COUNT_METRIC, episodes, "Count")],
            timestamp_ms=when,
        )
        return emf.write([line], out)
