"""The reward-worker runtime (ECS tasks of the hyperpod backend): episodes in, scored rollouts out."""

from mtrl.worker.runtime import (
    Policy,
    ResultSink,
    RolloutOutcome,
    RolloutRequest,
    RolloutSource,
    WorkerConfig,
    WorkerRuntime,
    play_episode,
)

__all__ = [
    "Policy",
    "ResultSink",
    "RolloutOutcome",
    "RolloutRequest",
    "RolloutSource",
    "WorkerConfig",
    "WorkerRuntime",
    "play_episode",
]
