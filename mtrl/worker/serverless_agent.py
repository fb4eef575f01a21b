"""The serverless MTRL agent's runtime (the ``lambda/serverless_agent`` Lambda, zip, boto3 only): plays one episode
per rollout request.

Payload (from the SageMaker serverless MTRL service): ``{"prompt": "<JSON string of the task>",
"metadata": {"jobArn" | "job_arn", "rolloutId" | "trajectoryId" | "trajectory_id", "region"?},
"inferenceParams" | "inference_params": {"temperature", "maxTokens" | "max_tokens", "topP" | "top_p"}}``.
The task JSON is a dataset row's ``metadata`` (``{"prompt", "answer", ...}``) or a whole row (``{"id",
"metadata": {...}}``).

The policy is sampled with ``sagemakerjobruntime`` ``Sample`` (OpenAI-compatible chat request/response
bodies, forwarded unchanged to the model); the result is reported with ``CompleteRollout`` (``ready``) and
``UpdateReward``. A bad episode — malformed task, model or service errors, a timeout — is a *low reward*,
never an error status: the service fails the whole job on a returned error. The fake-job-ARN smoke test
(``Could not find job`` from the service) is recognised and returned as a diagnosis.

In an evaluation job (``AgentRFTEvaluation`` in the job ARN) the score reported is the environment's external
evaluation (``mtrl.health.evaluation.score``: its ``EVALUATION``, or success 1/0 when it declares none), not the
training reward: the service's pass@k then measures what the task owner accepts as solved (the SageMaker AI
multi-turn RL best-practices post: evaluate separately from the reward). Training jobs get the reward.

Per-run agent options travel inside the task JSON under ``mtrl_agent`` (the serverless adapter writes them when it
converts the dataset): ``reasoning_effort`` (low|medium|high) is sent with every Sample request.

Package: the zip holds the function's handler (``lambda/serverless_agent/handler.py``, which only delegates to
:func:`handler` here) plus ``mtrl/``, ``environments/`` and ``custom-environments/`` at its root; boto3/botocore
come from the project's dependency layer (pinned in requirements/runtime.txt), never from the runtime, whose copy
may predate the ``sagemakerjobruntime`` service model.

Episodes are played by the one episode driver (``mtrl.envs.rollout``): the environment's own turn limit and system
prompt, the Lambda's remaining time (less a margin) as the deadline. Each episode's environment-side metrics are one
set of EMF lines (``mtrl.health.emf``) with the dimensions ``Environment`` and ``Job`` (the job's name): the
serverless backend reads that job's series back into the run's training-health rows (``mtrl.backends.episode_rows``).

Environment: MTRL_ENV_ID (default wordle), MTRL_MAX_TURNS (optional: only lowers the environment's own limit),
MTRL_SAMPLE_MAX_TOKENS (default 1024), MTRL_INVALID_TASK_REWARD (default -1.5), MTRL_TIME_MARGIN_S (default 10).
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Mapping
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from mtrl.contracts.environment import Environment, EpisodeResult
from mtrl.envs.registry import EnvironmentSpec, load_spec
from mtrl.envs.rollout import EpisodeRules, Rollout
from mtrl.envs.rollout import play as play_episode
from mtrl.health.emf import JOB_DIMENSION, EpisodeMetrics
from mtrl.health.evaluation import score as evaluation_score

log = logging.getLogger("mtrl.serverless_agent")
log.setLevel(logging.INFO)

EVALUATION_JOB_CATEGORY = "AgentRFTEvaluation"  # mtrl.backends.serverless.settings.EVALUATION_CATEGORY
_CLIENTS: dict[str, Any] = {}
_SPECS: dict[str, EnvironmentSpec] = {}


class JobNotFoundError(Exception):
    """The service does not know the job: expected for the fake-job-ARN smoke test."""


class AccessDeniedError(Exception):
    """403: the job ARN names another account, or the role lacks AmazonSageMakerJobRuntimeAccess."""


def _setting(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        log.warning("ignoring non-numeric %s=%r", name, os.environ.get(name))
        return default


def job_runtime_client(region: str | None) -> Any:
    key = region or ""
    if key not in _CLIENTS:
        # A few quick retries for throttling; the episode budget is bounded by the Lambda timeout.
        config = Config(retries={"max_attempts": 3, "mode": "standard"}, read_timeout=120, connect_timeout=5)
        _CLIENTS[key] = boto3.client("sagemakerjobruntime", region_name=region, config=config)
    return _CLIENTS[key]


def environment_spec(env_id: str) -> EnvironmentSpec:
    if env_id not in _SPECS:
        _SPECS[env_id] = load_spec(env_id)
    return _SPECS[env_id]


def _first(mapping: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        value = mapping.get(key)
        if value not in (None, ""):
            return value
    return None


AGENT_OPTIONS_KEY = "mtrl_agent"
REASONING_EFFORTS = ("low", "medium", "high")


def parse_task(prompt: Any) -> dict[str, Any]:
    """The task metadata from the payload's ``prompt`` (a JSON string, or already an object), without the run's
    agent options (see :func:`agent_options`)."""
    document = json.loads(prompt) if isinstance(prompt, str) else prompt
    if not isinstance(document, Mapping):
        raise ValueError("prompt must be a JSON object (the task row)")
    document = {key: value for key, value in document.items() if key != AGENT_OPTIONS_KEY}
    inner = document.get("metadata")
    task = dict(inner) if isinstance(inner, Mapping) else dict(document)
    task.setdefault("prompt", "")
    return task


def agent_options(prompt: Any) -> dict[str, Any]:
    """The run's agent-side choices carried in the task JSON; unknown or malformed values are ignored."""
    try:
        document = json.loads(prompt) if isinstance(prompt, str) else prompt
    except json.JSONDecodeError:
        return {}
    raw = document.get(AGENT_OPTIONS_KEY) if isinstance(document, Mapping) else None
    if not isinstance(raw, Mapping):
        return {}
    options: dict[str, Any] = {}
    if raw.get("reasoning_effort") in REASONING_EFFORTS:
        options["reasoning_effort"] = raw["reasoning_effort"]
    return options


def inference_params(payload: Mapping[str, Any]) -> dict[str, Any]:
    raw = _first(payload, "inferenceParams", "inference_params") or {}
    params: dict[str, Any] = {}
    if isinstance(raw, Mapping):
        for ours, keys in (("temperature", ("temperature",)), ("max_tokens", ("maxTokens", "max_tokens"))):
            value = _first(raw, *keys)
            if isinstance(value, int | float):
                params[ours] = value
        top_p = _first(raw, "topP", "top_p")
        if isinstance(top_p, int | float):
            params["top_p"] = top_p
    params.setdefault("max_tokens", int(_setting("MTRL_SAMPLE_MAX_TOKENS", 1024)))
    return params


def _classify(error: ClientError) -> BaseException:
    code = error.response.get("Error", {}).get("Code", "")
    message = error.response.get("Error", {}).get("Message", "")
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if "could not find job" in message.lower() or code == "ResourceNotFoundException":
        return JobNotFoundError(message or code)
    if status == 403 or code in {"AccessDeniedException", "AccessDenied"}:
        return AccessDeniedError(message or code)
    classified: BaseException = error
    return classified


def sample(
    client: Any, job_arn: str, trajectory_id: str, messages: list[dict[str, str]], params: dict[str, Any]
) -> str:
    body = json.dumps({"model": "default", "messages": messages, **params}).encode()
    try:
        response = client.sample(JobArn=job_arn, TrajectoryId=trajectory_id, Body=body)
    except ClientError as error:
        raise _classify(error) from error
    document = json.loads(response["Body"].read())
    message = document["choices"][0]["message"]
    content = message.get("content") or ""
    return content if isinstance(content, str) else json.dumps(content)


ENDED = {"done": "done", "turn_limit": "turn limit reached", "deadline": "time budget exhausted"}


def play(
    env: Environment,
    task: Mapping[str, Any],
    *,
    client: Any,
    job_arn: str,
    trajectory_id: str,
    params: dict[str, Any],
    rules: EpisodeRules,
) -> Rollout:
    """Play the episode through the one episode driver, sampling each action from the job's policy."""

    def act(messages: list[dict[str, str]], *, timeout_s: float | None) -> str:
        return sample(client, job_arn, trajectory_id, messages, params)

    return play_episode(env, task, act, rules)


def report(client: Any, job_arn: str, trajectory_id: str, reward: float) -> None:
    """CompleteRollout(ready) then UpdateReward; idempotent tokens so a retried invocation cannot double-count."""
    token = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{job_arn}/{trajectory_id}"))
    client.complete_rollout(JobArn=job_arn, TrajectoryId=trajectory_id, Status="ready", ClientToken=token + "-c")
    client.update_reward(JobArn=job_arn, TrajectoryId=trajectory_id, Rewards=[reward], ClientToken=token + "-r")


def handle(payload: Mapping[str, Any], *, remaining_ms: int | None = None) -> dict[str, Any]:
    margin = _setting("MTRL_TIME_MARGIN_S", 10.0)
    budget = (remaining_ms / 1000.0 - margin) if remaining_ms is not None else 600.0
    low_reward = _setting("MTRL_INVALID_TASK_REWARD", -1.5)
    metadata = payload.get("metadata") if isinstance(payload.get("metadata"), Mapping) else {}
    assert isinstance(metadata, Mapping)
    job_arn = _first(metadata, "jobArn", "job_arn")
    trajectory_id = _first(metadata, "rolloutId", "trajectoryId", "trajectory_id")
    region = _first(metadata, "region") or os.environ.get("AWS_REGION")
    env_id = os.environ.get("MTRL_ENV_ID", "wordle")
    context = {"job_arn": job_arn, "trajectory_id": trajectory_id, "env_id": env_id}
    evaluating = isinstance(job_arn, str) and is_evaluation_job(job_arn)
    if evaluating:
        low_reward = 0.0  # an evaluation scores in [0, 1]: an episode that could not be played is not solved
    if not isinstance(job_arn, str) or not isinstance(trajectory_id, str):
        log.error("payload without job ARN or rollout id; nothing to report to: %s", json.dumps(context))
        return {"reward": low_reward, "diagnosis": "missing jobArn or rolloutId in metadata"}

    try:
        spec = environment_spec(env_id)
        task = parse_task(payload.get("prompt"))
        problems = spec.validate_task(task)
        if problems:
            raise ValueError("; ".join(problems))
    except Exception as error:  # a bad task is a low reward, never a failed job
        log.error("invalid task (%s): %s", json.dumps(context), error)
        return _finish(job_arn, trajectory_id, region, low_reward, metrics={}, ended=f"invalid task: {error}")

    client = job_runtime_client(region if isinstance(region, str) else None)
    rules = spec.rules(timeout_s=max(budget, 0.0), max_turns=_max_turns_cap())
    rollout: Rollout | None = None
    try:
        rollout = play(
            spec.make(),
            task,
            client=client,
            job_arn=job_arn,
            trajectory_id=trajectory_id,
            params={**inference_params(payload), **agent_options(payload.get("prompt"))},
            rules=rules,
        )
        failure = rollout.error
    except Exception as raised:  # outside the driver (it hands every episode error back in the rollout)
        failure = raised
    reward = _score(rollout.result if rollout else None, low_reward, evaluating=evaluating)
    if rollout is not None:
        _publish_metrics(env_id, job_arn, rollout)
    if isinstance(failure, JobNotFoundError):
        log.warning(
            "Sample: job not found (%s) — wiring is OK if this is the smoke test: %s", json.dumps(context), failure
        )
        return {"reward": reward, "diagnosis": "job not found (expected for the fake-job-ARN smoke test)"}
    if isinstance(failure, AccessDeniedError):
        log.error("Sample: access denied (%s): %s", json.dumps(context), failure)
        return {
            "reward": reward,
            "diagnosis": "access denied: the job ARN names another account, or the role lacks "
            "AmazonSageMakerJobRuntimeAccess",
        }
    if isinstance(failure, ClientError | BotoCoreError | ValueError | KeyError | IndexError | TypeError):
        log.error("episode failed (%s): %s: %s", json.dumps(context), type(failure).__name__, failure)
        ended = f"episode failed: {type(failure).__name__}"
        return _finish(job_arn, trajectory_id, region, reward, metrics={}, ended=ended)
    if failure is not None:  # anything else is a bug in the environment: the invocation fails loudly
        raise failure
    assert rollout is not None
    assert rollout.result is not None  # no error: result() returned
    components = {entry["name"]: entry["value"] for entry in rollout.result.metrics_list()}
    return _finish(job_arn, trajectory_id, region, reward, metrics=components, ended=ENDED.get(rollout.ended, "done"))


def job_name_of(job_arn: str) -> str:
    """``arn:…:job/<category>/<name>`` → ``<name>`` (the whole string when it is not such an ARN)."""
    _, _, tail = job_arn.partition(":job/")
    return tail.partition("/")[2] or job_arn


def _publish_metrics(env_id: str, job_arn: str, rollout: Rollout) -> None:
    """The episode's environment-side metrics (EMF on stdout, which Lambda ships to CloudWatch Logs), per job: the
    agent serves every run of its environment, and the serverless backend's signal rows read one job's series."""
    try:
        EpisodeMetrics(env_id, dimensions={JOB_DIMENSION: job_name_of(job_arn)[:255]}).publish([[rollout]])
    except Exception as error:  # metrics never change the reward reported
        log.warning("publishing the episode metrics failed: %s: %s", type(error).__name__, error)


def _max_turns_cap() -> int | None:
    """``MTRL_MAX_TURNS`` may lower the environment's own limit (a quick test); unset, the environment decides."""
    raw = os.environ.get("MTRL_MAX_TURNS", "").strip()
    try:
        return int(raw) if raw else None
    except ValueError:
        log.warning("ignoring non-numeric MTRL_MAX_TURNS=%r", raw)
        return None


def is_evaluation_job(job_arn: str) -> bool:
    """``arn:…:job/AgentRFTEvaluation/<name>``: the held-out evaluation, scored by the external evaluation."""
    return f":job/{EVALUATION_JOB_CATEGORY}/" in job_arn


def _score(result: EpisodeResult | None, fallback: float, *, evaluating: bool) -> float:
    if result is None:  # the environment itself broke: still a reward, never an error
        return fallback
    return evaluation_score(result) if evaluating else float(result.reward)


def _finish(
    job_arn: str, trajectory_id: str, region: Any, reward: float, *, metrics: dict[str, float], ended: str
) -> dict[str, Any]:
    try:
        report(job_runtime_client(region if isinstance(region, str) else None), job_arn, trajectory_id, reward)
        reported = True
    except ClientError as error:
        classified = _classify(error)
        log.error("reporting the reward failed (%s): %s", type(classified).__name__, error)
        reported = False
    except BotoCoreError as error:
        log.error("reporting the reward failed: %s", error)
        reported = False
    log.info(json.dumps({"trajectory_id": trajectory_id, "reward": reward, "ended": ended, "reported": reported}))
    return {"reward": reward, "metrics": metrics, "ended": ended, "reported": reported}


def handler(event: Any, context: Any = None) -> dict[str, Any]:
    """Lambda entry point. Accepts the payload itself or an HTTP-style event with a JSON ``body``."""
    payload = event
    if isinstance(event, Mapping) and isinstance(event.get("body"), str) and "prompt" not in event:
        try:
            payload = json.loads(event["body"])
        except json.JSONDecodeError:
            payload = {}
    if not isinstance(payload, Mapping):
        log.error("payload is not a JSON object")
        return {"reward": _setting("MTRL_INVALID_TASK_REWARD", -1.5), "diagnosis": "payload is not a JSON object"}
    remaining = context.get_remaining_time_in_millis() if hasattr(context, "get_remaining_time_in_millis") else None
    return handle(payload, remaining_ms=remaining)
