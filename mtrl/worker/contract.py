"""The reward worker's launch contract: the environment variables a run's workers are started with.

One definition used by both sides — the ``hyperpod`` backend that starts the workers and the worker's own
entry point that reads them — so the two cannot drift apart.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

RUN_ID = "MTRL_RUN_ID"
ENV_ID = "MTRL_ENV_ID"
ENV_ARGS = "MTRL_ENV_ARGS"  # JSON object passed to the environment's make_env(**args)
CUSTOM_ENV = "MTRL_CUSTOM_ENV"  # "true": only custom-environments/, "false": only built-ins; unset: both
REQUEST_QUEUE_URL = "MTRL_REQUEST_QUEUE_URL"  # rollout requests from the trainer
RESULT_QUEUE_URL = "MTRL_RESULT_QUEUE_URL"  # scored episodes back to the trainer
POLICY_URL = "MTRL_POLICY_URL"  # the policy endpoint the episodes call (the run's completion proxy)
# The metrics dimension naming the run on every line the workers publish (the hyperpod backend's signal rows read it).
RUN_DIMENSION = "RunId"


def worker_environment(
    *,
    run_id: str,
    env_id: str,
    env_args: Mapping[str, Any],
    request_queue_url: str,
    result_queue_url: str,
    policy_url: str,
    custom: bool | None = None,
) -> dict[str, str]:
    """The environment variables one run's reward workers start with."""
    environment = {
        RUN_ID: run_id,
        ENV_ID: env_id,
        ENV_ARGS: json.dumps(dict(env_args), sort_keys=True),
        REQUEST_QUEUE_URL: request_queue_url,
        RESULT_QUEUE_URL: result_queue_url,
        POLICY_URL: policy_url,
    }
    if custom is not None:
        environment[CUSTOM_ENV] = "true" if custom else "false"
    return environment


def custom_flag(environ: Mapping[str, str]) -> bool | None:
    raw = environ.get(CUSTOM_ENV, "").strip().lower()
    return {"true": True, "false": False}.get(raw)


def env_args(environ: Mapping[str, str]) -> dict[str, Any]:
    """The environment's keyword arguments; a malformed value is a ValueError naming the variable."""
    raw = environ.get(ENV_ARGS, "").strip()
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ValueError(f"{ENV_ARGS} is not valid JSON: {error}") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"{ENV_ARGS} must be a JSON object, got {type(parsed).__name__}")
    return parsed
