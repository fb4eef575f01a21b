"""What a pipeline phase needs at run time: AWS clients, resource names and settings (from the environment)."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import boto3

from mtrl.runs.registry import RunRegistry
from mtrl.runs.slots import SlotPool
from mtrl.settings.pipeline import PIPELINE_SETTINGS_ENV, PipelineSettings

# Environment variables the pipeline stack sets on its functions.
ENV_TABLE = "MTRL_RUN_TABLE"
ENV_BUCKET = "MTRL_DATA_BUCKET"
ENV_TOPIC = "MTRL_TOPIC_ARN"
ENV_STATE_MACHINE = "MTRL_STATE_MACHINE_ARN"
ENV_BACKEND_FUNCTION = "MTRL_BACKEND_FUNCTION"
# JSON object: backend name → the values its stack side ships; a run's adapter sees its own backend's, merged.
ENV_BACKEND_SETTINGS = "MTRL_BACKEND_SETTINGS"
ENV_DEPLOYMENT = "MTRL_DEPLOYMENT"  # the deployment's prefix (its per-deployment health series)


@dataclass
class Runtime:
    dynamodb: Any
    s3: Any
    table: str
    bucket: str
    settings: PipelineSettings
    sns: Any = None
    stepfunctions: Any = None
    lambda_client: Any = None
    cloudwatch: Any = None  # the status poll publishes mtrl/RunHealth (mtrl.runs.health_poll)
    topic_arn: str | None = None
    state_machine_arn: str | None = None
    backend_function: str | None = None
    backend_settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    deployment: str | None = None
    clock: Callable[[], float] = time.time

    @functools.cached_property
    def registry(self) -> RunRegistry:
        """One registry per runtime, so a phase's consecutive updates skip re-reading what it just wrote."""
        return RunRegistry(self.dynamodb, self.table)

    @property
    def slots(self) -> SlotPool:
        return SlotPool(
            self.dynamodb,
            self.table,
            capacity=self.settings.max_concurrent_runs,
            lease_seconds=self.settings.slot_lease_minutes * 60,
            # A waiting run refreshes its ticket every poll; three missed polls (at least 5 min) = gone.
            stale_after_seconds=max(3 * self.settings.slot_poll_seconds, 300),
            clock=self.clock,
        )


_cache: dict[tuple[str, ...], Runtime] = {}


def runtime_from_env(environ: Mapping[str, str] | None = None) -> Runtime:
    """The runtime a Lambda function was deployed with: its clients and settings are built once per distinct
    configuration; each call (one per invocation) gets its own registry, so what one invocation learnt of a record
    is not carried into the next (a warm function would otherwise keep every run it ever served)."""
    env = os.environ if environ is None else environ
    missing = [name for name in (ENV_TABLE, ENV_BUCKET, PIPELINE_SETTINGS_ENV) if not env.get(name)]
    if missing:
        raise RuntimeError(f"function is missing environment variables {missing} (deployment is broken)")
    cache_key = tuple(
        env.get(name, "")
        for name in (
            ENV_TABLE,
            ENV_BUCKET,
            PIPELINE_SETTINGS_ENV,
            ENV_TOPIC,
            ENV_STATE_MACHINE,
            ENV_BACKEND_FUNCTION,
            ENV_BACKEND_SETTINGS,
            ENV_DEPLOYMENT,
            "AWS_ENDPOINT_URL",
        )
    )
    cached = _cache.get(cache_key)
    if cached is not None:
        return dataclasses.replace(cached)
    runtime = Runtime(
        dynamodb=boto3.client("dynamodb"),
        s3=boto3.client("s3"),
        sns=boto3.client("sns") if env.get(ENV_TOPIC) else None,
        stepfunctions=boto3.client("stepfunctions") if env.get(ENV_STATE_MACHINE) else None,
        lambda_client=boto3.client("lambda") if env.get(ENV_BACKEND_FUNCTION) else None,
        cloudwatch=boto3.client("cloudwatch"),
        table=env[ENV_TABLE],
        bucket=env[ENV_BUCKET],
        settings=PipelineSettings.model_validate_json(env[PIPELINE_SETTINGS_ENV]),
        topic_arn=env.get(ENV_TOPIC) or None,
        state_machine_arn=env.get(ENV_STATE_MACHINE) or None,
        backend_function=env.get(ENV_BACKEND_FUNCTION) or None,
        backend_settings=json.loads(env.get(ENV_BACKEND_SETTINGS) or "{}"),
        deployment=env.get(ENV_DEPLOYMENT) or None,
    )
    _cache.clear()  # one configuration per process in Lambda; tests switch between several
    _cache[cache_key] = runtime
    return dataclasses.replace(runtime)
