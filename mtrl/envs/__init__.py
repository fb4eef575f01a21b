"""Reward environments: the plug-in contract, the registry, and the building blocks environments are made of.

Blocks (docs/extending.md, "Building an environment from the blocks"): ``tools`` (tool-call syntax,
record–replay tools, ``ToolBox``, ``FixtureRecorder``), ``episode_state`` (seeded per-episode SQLite and
guaranteed cleanup), ``execution`` (the sandbox as a cached block; import it from ``mtrl.envs.execution``:
it loads ``mtrl.sandbox``), ``scoring`` (final answer, exact match, partial credit, when to densify) and
``normalise`` (the one normalisation of tool inputs and answer fields).
"""

from mtrl.contracts.environment import (
    Environment,
    EpisodeResult,
    StepResult,
    TaskError,
    close_environment,
    closing,
)
from mtrl.envs.episode_state import EpisodeState, StateError, open_states
from mtrl.envs.normalise import canonical_key, normalise
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
