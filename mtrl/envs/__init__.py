"""Reward environments: the plug-in contract, the registry, and the building blocks environments are made of.

Blocks (docs/extending.md, "Building an environment from the blocks"): ``tools`` (tool-call syntax,
record–replay tools, ``ToolBox``, ``FixtureRecorder``), ``episode_state`` (seeded per-episode SQLite and
guaranteed cleanup), ``execution`` (the sandbox as a cached block; import it from ``mtrl.envs.execution``:
it loads ``mtrl.sandbox``), ``scoring`` (final answer, exact match, partial credit, when to densify) and
``normalise`` (the one normalisation of tool inputs and answer fields).

The names below are imported from their modules on first use, so that a command that only looks environments up
(`mtrl config show`, `mtrl env list`) loads neither the rollout driver (asyncio) nor the episode state (sqlite3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mtrl.contracts.lazy import lazy_names

# Imported now: ``normalise`` is also the name of its module, which would shadow the function once any module
# imported ``mtrl.envs.normalise`` (it is small: json, math, re, decimal).
from mtrl.envs.normalise import canonical_key, normalise

if TYPE_CHECKING:
    from mtrl.contracts.environment import (
        Environment,
        EpisodeResult,
        StepResult,
        TaskError,
        close_environment,
        closing,
    )
    from mtrl.envs.episode_state import EpisodeState, StateError, open_states
    from mtrl.envs.registry import (
        EnvironmentNotFoundError,
        EnvironmentSpec,
        InvalidEnvironmentError,
        check_custom_environment,
        custom_environment_problems,
        deployment_environment_problems,
        list_environments,
        load_spec,
        served_environment_problem,
    )
    from mtrl.envs.rollout import EpisodeRules, Rollout, run_episode
    from mtrl.envs.scoring import (
        STARVED_SHARE,
        DensifyVerdict,
        densify_verdict,
        exact_match,
        extract_final_output,
        field_fraction,
        field_matches,
        zero_spread_share,
    )
    from mtrl.envs.tools import (
        FixtureConflictError,
        FixtureError,
        FixtureRecorder,
        FunctionTool,
        ReplayTool,
        Tool,
        ToolBox,
        ToolCall,
        ToolCallError,
        ToolError,
        ToolOutcome,
        format_tool_call,
        parse_tool_call,
        tool_error,
    )

__all__ = [
    "STARVED_SHARE",
    "DensifyVerdict",
    "Environment",
    "EnvironmentNotFoundError",
    "EnvironmentSpec",
    "EpisodeResult",
    "EpisodeRules",
    "EpisodeState",
    "FixtureConflictError",
    "FixtureError",
    "FixtureRecorder",
    "FunctionTool",
    "InvalidEnvironmentError",
    "ReplayTool",
    "Rollout",
    "StateError",
    "StepResult",
    "TaskError",
    "Tool",
    "ToolBox",
    "ToolCall",
    "ToolCallError",
    "ToolError",
    "ToolOutcome",
    "canonical_key",
    "check_custom_environment",
    "close_environment",
    "closing",
    "custom_environment_problems",
    "densify_verdict",
    "deployment_environment_problems",
    "exact_match",
    "extract_final_output",
    "field_fraction",
    "field_matches",
    "format_tool_call",
    "list_environments",
    "load_spec",
    "normalise",
    "open_states",
    "parse_tool_call",
    "run_episode",
    "served_environment_problem",
    "tool_error",
    "zero_spread_share",
]

_MODULE_OF = {
    "Environment": "mtrl.contracts.environment",
    "EpisodeResult": "mtrl.contracts.environment",
    "StepResult": "mtrl.contracts.environment",
    "TaskError": "mtrl.contracts.environment",
    "close_environment": "mtrl.contracts.environment",
    "closing": "mtrl.contracts.environment",
    "EpisodeState": "mtrl.envs.episode_state",
    "StateError": "mtrl.envs.episode_state",
    "open_states": "mtrl.envs.episode_state",
    "EnvironmentNotFoundError": "mtrl.envs.registry",
    "EnvironmentSpec": "mtrl.envs.registry",
    "InvalidEnvironmentError": "mtrl.envs.registry",
    "check_custom_environment": "mtrl.envs.registry",
    "custom_environment_problems": "mtrl.envs.registry",
    "deployment_environment_problems": "mtrl.envs.registry",
    "list_environments": "mtrl.envs.registry",
    "load_spec": "mtrl.envs.registry",
    "served_environment_problem": "mtrl.envs.registry",
    "EpisodeRules": "mtrl.envs.rollout",
    "Rollout": "mtrl.envs.rollout",
    "run_episode": "mtrl.envs.rollout",
    "DensifyVerdict": "mtrl.envs.scoring",
    "STARVED_SHARE": "mtrl.envs.scoring",
    "densify_verdict": "mtrl.envs.scoring",
    "exact_match": "mtrl.envs.scoring",
    "extract_final_output": "mtrl.envs.scoring",
    "field_fraction": "mtrl.envs.scoring",
    "field_matches": "mtrl.envs.scoring",
    "zero_spread_share": "mtrl.envs.scoring",
    "FixtureConflictError": "mtrl.envs.tools",
    "FixtureError": "mtrl.envs.tools",
    "FixtureRecorder": "mtrl.envs.tools",
    "FunctionTool": "mtrl.envs.tools",
    "ReplayTool": "mtrl.envs.tools",
    "Tool": "mtrl.envs.tools",
    "ToolBox": "mtrl.envs.tools",
    "ToolCall": "mtrl.envs.tools",
    "ToolCallError": "mtrl.envs.tools",
    "ToolError": "mtrl.envs.tools",
    "ToolOutcome": "mtrl.envs.tools",
    "format_tool_call": "mtrl.envs.tools",
    "parse_tool_call": "mtrl.envs.tools",
    "tool_error": "mtrl.envs.tools",
}

__getattr__ = lazy_names(__name__, globals(), _MODULE_OF)
