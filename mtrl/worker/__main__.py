"""Reward-worker entry point (the container's command): ``python -m mtrl.worker``.

Configuration comes from the task definition's environment:
MTRL_ENV_ID (default wordle), MTRL_ENV_ARGS, MTRL_CUSTOM_ENV (see mtrl/worker/contract.py), MTRL_REQUEST_QUEUE_URL,
MTRL_RESULT_QUEUE_URL, MTRL_POLICY_URL, MTRL_POLICY_MODEL, MTRL_POLICY_AUTH (``auto``: SigV4-sign requests to a
Lambda function URL, which the Nova Forge proxy's is, with the task role; ``aws_iam``: always sign, region from the
URL or AWS_REGION; ``none``: never), MTRL_CONCURRENCY, MTRL_EPISODE_TIMEOUT_S,
MTRL_MAX_TURNS, MTRL_GRACE_S, MTRL_GROUP_SIZE, MTRL_RUN_ID. A missing or bad value exits with code 2 and a
message naming it.

Nova Forge mode: when MTRL_NOVA_FORGE_COMMAND is set (the starter kit's environment-client command, installed
into the image at build time from docker/reward-worker/starter-kit/ — never fetched at run time), the worker
checks the environment package and then replaces itself with that command, with MTRL_ENV_MODULE naming the
package whose ``load_environment`` the client should call and the project root on PYTHONPATH.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from collections.abc import Callable, Mapping
from typing import Any

from mtrl.envs.registry import EnvironmentNotFoundError, InvalidEnvironmentError, load_spec, project_root
from mtrl.worker import contract
from mtrl.worker.runtime import WorkerConfig, WorkerRuntime
from mtrl.worker.transport import (
    HttpChatPolicy,
    SigV4Signer,
    SqsResultSink,
    SqsRolloutSource,
    function_url_region,
)


class ConfigError(ValueError):
    pass


def _required(environ: Mapping[str, str], name: str) -> str:
    value = environ.get(name, "").strip()
    if not value:
        raise ConfigError(f"{name} is required")
    return value


def _number(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number (got {raw!r})") from None


def _optional_int(environ: Mapping[str, str], name: str) -> int | None:
    raw = environ.get(name)
    return None if raw is None or not raw.strip() else int(_number(environ, name, 0))


def config_from_env(environ: Mapping[str, str]) -> WorkerConfig:
    dimensions = {contract.RUN_DIMENSION: environ[contract.RUN_ID]} if environ.get(contract.RUN_ID) else {}
    try:
        return WorkerConfig(
            concurrency=int(_number(environ, "MTRL_CONCURRENCY", 4)),
            episode_timeout_s=_number(environ, "MTRL_EPISODE_TIMEOUT_S", 300.0),
            max_turns=_optional_int(environ, "MTRL_MAX_TURNS"),
            grace_s=_number(environ, "MTRL_GRACE_S", 25.0),
            group_size=int(_number(environ, "MTRL_GROUP_SIZE", 8)),
            health_dimensions=dimensions,
            env_args=contract.env_args(environ),
        )
    except ValueError as error:
        raise ConfigError(str(error)) from None


def policy_from_env(environ: Mapping[str, str], credentials: Callable[[], Any] | None = None) -> HttpChatPolicy:
    """The policy client; ``credentials`` defaults to boto3's chain (the ECS task role in the container)."""
    url = _required(environ, contract.POLICY_URL)
    auth = environ.get("MTRL_POLICY_AUTH", "auto").strip().lower() or "auto"
    if auth not in {"auto", "aws_iam", "none"}:
        raise ConfigError(f"MTRL_POLICY_AUTH must be auto, aws_iam or none (got {auth!r})")
    region = function_url_region(url)
    signer = None
    if auth == "aws_iam" or (auth == "auto" and region is not None):
        region = region or environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
        if not region:
            raise ConfigError(f"MTRL_POLICY_AUTH={auth}: cannot tell the signing region of {url} (set AWS_REGION)")
        if credentials is None:
            import boto3  # noqa: PLC0415 - only the container needs AWS clients

            credentials = boto3.Session().get_credentials
        signer = SigV4Signer(credentials, region)
    return HttpChatPolicy(url, model=environ.get("MTRL_POLICY_MODEL", "default"), signer=signer)


def exec_nova_forge(env: dict[str, str]) -> int:
    """Hand the process over to the starter kit's environment client (it owns queues and signals from here)."""
    try:
        spec = load_spec(env.get(contract.ENV_ID, "wordle"), custom=contract.custom_flag(env))
        command = shlex.split(env["MTRL_NOVA_FORGE_COMMAND"])
    except (EnvironmentNotFoundError, InvalidEnvironmentError, ValueError) as error:
        print(f"reward worker: {error}", file=sys.stderr)
        return 2
    if not command:
        print("reward worker: MTRL_NOVA_FORGE_COMMAND is empty", file=sys.stderr)
        return 2
    root = str(project_root())
    child_env = dict(env)
    child_env["MTRL_ENV_MODULE"] = spec.module.__name__ if spec.source == "builtin" else str(spec.path)
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH", "")]))
    os.execvpe(command[0], command, child_env)  # noqa: S606 - a deploy-time command, not user input
    return 0  # not reached: execvpe replaces the process (tests patch it)


def main(environ: Mapping[str, str] | None = None) -> int:
    env = dict(os.environ if environ is None else environ)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if env.get("MTRL_NOVA_FORGE_COMMAND") is not None:
        return exec_nova_forge(env)
    try:
        config = config_from_env(env)
        spec = load_spec(env.get(contract.ENV_ID, "wordle"), custom=contract.custom_flag(env))
        request_url = _required(env, contract.REQUEST_QUEUE_URL)
        result_url = _required(env, contract.RESULT_QUEUE_URL)
        policy = policy_from_env(env)
    except (ConfigError, EnvironmentNotFoundError, InvalidEnvironmentError, ValueError) as error:
        print(f"reward worker: {error}", file=sys.stderr)
        return 2
    import boto3  # noqa: PLC0415 - only the container needs AWS clients

    sqs = boto3.client("sqs")  # region and credentials from the ECS task environment
    source = SqsRolloutSource(sqs, request_url)
    sink = SqsResultSink(sqs, result_url)
    runtime = WorkerRuntime(spec, source, sink, policy, config)
    runtime.install_signal_handlers()
    runtime.run()
    logging.getLogger("mtrl.worker").info(
        "stopped: %d rollouts published, %d abandoned", runtime.published, runtime.abandoned
    )
    logging.shutdown()
    sys.stdout.flush()
    # Abandoned episodes may still be running in threads; they were released and will not publish.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
