"""Reward environments: the plug-in contract and the registry that finds built-in and custom ones."""

from mtrl.envs.contract import Environment, EpisodeResult, StepResult, TaskError, run_episode
from mtrl.envs.registry import (
    EnvironmentNotFoundError,
    EnvironmentSpec,
    InvalidEnvironmentError,
    check_custom_environment,
    custom_environment_problems,
    list_environments,
    load_spec,
)

__all__ = [
    "Environment",
    "EnvironmentNotFoundError",
    "EnvironmentSpec",
    "EpisodeResult",
    "InvalidEnvironmentError",
    "StepResult",
    "TaskError",
    "check_custom_environment",
    "custom_environment_problems",
    "list_environments",
    "load_spec",
    "run_episode",
]
