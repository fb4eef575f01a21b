"""The worker runtimes: episodes in, scored rollouts out. ``runtime`` is the reward workers' (ECS tasks of the hyperpod
backend); ``serverless_agent`` is the serverless backend's agent Lambda's (one episode per rollout request)."""

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
