"""Entry point of the Nova Forge runner container: ``python -m mtrl.backends.nova_runner <command> --spec s3://…``.

The Nova Forge SDK (``amzn-nova-forge``) needs Python ≥ 3.12 and the HyperPod CLI, so it runs here, in a task the
``hyperpod`` adapter starts, never in a Lambda. The SDK is imported only inside the commands. Each command reads
the run's spec (written by the adapter) and writes ``<result_prefix>/<command>.json``:
``{"command", "ok", "result" | "error", "finished_at", "finished_at_epoch"}``.

What each command calls (names from the SDK's public code, v1.4.x):

- ``setup``: ``amzn_nova_forge.rft_multiturn.RFTMultiturnInfrastructure(stack_name, region, infrastructure_arn=<ECS
  cluster>, vf_env_id=VFEnvId(...) | custom_env=CustomEnvironment(...), rft_role_name, vpc_config).setup()`` — the
  SDK deploys ``<stack_name>-NovaForgeSDK`` (queues, proxy/rollout Lambdas, table). Because CDK pre-attached the
  policy ``<rft_role_name>Policy`` to this task's role, the SDK's ``ensure_rft_policy_on_current_role`` returns
  early and never writes IAM. Endpoints are then read from the stack's outputs with CloudFormation.
- ``submit``: ``ForgeTrainer(model=Model[...], method=TrainingMethod[...], infra=SMHPRuntimeManager(instance_type,
  instance_count, cluster_name, namespace), training_data_s3_path, config=ForgeConfig(output_s3_path,
  mlflow_monitor?)).train(job_name, overrides, rft_multiturn_infra=infra)`` (``setup()`` first, which the SDK
  needs to load the stack outputs; it is idempotent).
- ``status`` / ``cancel``: the HyperPod CLI the SDK itself drives (``hyperpod connect-cluster``, ``get-job``,
  ``cancel-job``), reading ``Status.conditions[-1].type`` as the SDK's status manager does.
- ``teardown``: ``RFTMultiturnInfrastructure(...).cleanup(delete_stack=True, cleanup_environment=True)`` — for
  manual use; the adapter's cleanup deletes the stack itself so teardown never depends on this container.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import boto3

from mtrl.backends._aws import S3Uri, short_token

COMMANDS = ("setup", "submit", "status", "cancel", "teardown")

# CloudFormation outputs of the SDK stack → the names the adapter and reward workers use (reference B.2).
STACK_OUTPUTS = {
    "RolloutFunctionName": "rollout_function_name",
    "RolloutQueueUrl": "rollout_request_queue_url",
    "RolloutFinishedQueueUrl": "rollout_response_sqs_url",
    "RequestQueueUrl": "generate_request_sqs_url",
    "RequestResponseQueueUrl": "generate_response_sqs_url",
    "ProxyFunctionUrl": "proxy_function_url",
    "TasksTableName": "dynamo_table_name",
}

CliRunner = Callable[[Sequence[str]], str]


def run_cli(args: Sequence[str]) -> str:
    """Run the HyperPod CLI; a non-zero exit is an error carrying its stderr."""
    completed = subprocess.run(list(args), capture_output=True, text=True, timeout=600, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:2])} exited {completed.returncode}: {completed.stderr.strip()[-2000:]}")
    return completed.stdout


def job_name(spec: Mapping[str, Any]) -> str:
    """Kubernetes-safe (lowercase, ≤ 63) and stable per run, so a retried submit finds the same job."""
    return f"mtrl-{short_token(str(spec['run_id']), 16)}"


def _infrastructure(spec: Mapping[str, Any]) -> Any:
    # Lazy: the SDK exists only in the runner image (Python ≥ 3.12), never in Lambdas or tests.
    from amzn_nova_forge.rft_multiturn import (  # type: ignore[import-not-found]  # noqa: PLC0415
        CustomEnvironment,
        RFTMultiturnInfrastructure,
        VFEnvId,
    )

    environment: dict[str, Any] = {}
    if spec.get("custom_env_s3_uri"):
        environment["custom_env"] = CustomEnvironment(
            env_id=spec["environment"], s3_uri=spec["custom_env_s3_uri"], env_type="multi_turn"
        )
    else:
        try:
            environment["vf_env_id"] = VFEnvId(spec["environment"])
        except ValueError as error:
            raise ValueError(
                f"environment '{spec['environment']}' is not a Nova Forge built-in; set custom_env_s3_uri"
            ) from error
    return RFTMultiturnInfrastructure(
        stack_name=spec["stack_name"],
        region=spec["region"],
        infrastructure_arn=spec["ecs_cluster_arn"],
        rft_role_name=spec["rft_role_name"],
        vpc_config=spec.get("vpc_config"),
        **environment,
    )


def stack_outputs(cloudformation: Any, stack_name: str) -> dict[str, str]:
    stack = cloudformation.describe_stacks(StackName=f"{stack_name}-NovaForgeSDK")["Stacks"][0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    missing = [key for key in ("RolloutQueueUrl", "ProxyFunctionUrl") if key not in outputs]
    if missing:
        raise RuntimeError(f"stack {stack_name}-NovaForgeSDK has no output(s) {missing}")
    return {ours: outputs[theirs] for theirs, ours in STACK_OUTPUTS.items() if theirs in outputs}


def setup(spec: Mapping[str, Any], *, cloudformation: Any, cli: CliRunner) -> dict[str, Any]:
    del cli
    _infrastructure(spec).setup()
    return stack_outputs(cloudformation, spec["stack_name"])


def submit(spec: Mapping[str, Any], *, cloudformation: Any, cli: CliRunner) -> dict[str, Any]:
    del cloudformation, cli
    from amzn_nova_forge import (  # type: ignore[import-not-found]  # noqa: PLC0415
        ForgeConfig,
        ForgeTrainer,
        MLflowMonitor,
        Model,
        SMHPRuntimeManager,
        TrainingMethod,
    )

    infrastructure = _infrastructure(spec)
    infrastructure.setup()  # loads the stack outputs the trainer injects into the recipe
    name = job_name(spec)
    monitor = (
        MLflowMonitor(tracking_uri=spec["mlflow_tracking_arn"], experiment_name="mtrl", run_name=name)
        if spec.get("mlflow_tracking_arn")
        else None
    )
    trainer = ForgeTrainer(
        model=Model[spec["model"]],
        method=TrainingMethod[spec["training_method"]],
        infra=SMHPRuntimeManager(
            instance_type=spec["instance_type"],
            instance_count=spec["instance_count"],
            cluster_name=spec["hyperpod_cluster_name"],
            namespace=spec["namespace"],
        ),
        training_data_s3_path=spec["dataset_uri"],
        config=ForgeConfig(output_s3_path=spec["output_uri"], mlflow_monitor=monitor),
    )
    result = trainer.train(
        job_name=name, overrides=dict(spec.get("overrides") or {}), rft_multiturn_infra=infrastructure
    )
    return {"job_name": str(getattr(result, "job_id", None) or name)}


def _connect(spec: Mapping[str, Any], cli: CliRunner) -> None:
    cli(
        [
            "hyperpod",
            "connect-cluster",
            "--cluster-name",
            spec["hyperpod_cluster_name"],
            "--namespace",
            spec["namespace"],
        ]
    )


def status(spec: Mapping[str, Any], *, cloudformation: Any, cli: CliRunner) -> dict[str, Any]:
    del cloudformation
    _connect(spec, cli)
    name = job_name(spec)
    job = json.loads(cli(["hyperpod", "get-job", "--job-name", name, "--namespace", spec["namespace"]]))
    conditions = (job.get("Status") or {}).get("conditions") or []
    if not conditions:
        return {"job_name": name, "state": "Pending", "message": "job created, not scheduled yet"}
    last = conditions[-1]
    return {
        "job_name": name,
        "state": str(last.get("type", "Pending")),
        "message": str(last.get("message") or last.get("reason") or last.get("type", "")),
        "started_at": (job.get("Status") or {}).get("startTime"),
    }


def cancel(spec: Mapping[str, Any], *, cloudformation: Any, cli: CliRunner) -> dict[str, Any]:
    del cloudformation
    _connect(spec, cli)
    cli(["hyperpod", "cancel-job", "--job-name", job_name(spec), "--namespace", spec["namespace"]])
    return {"job_name": job_name(spec), "cancelled": True}


def teardown(spec: Mapping[str, Any], *, cloudformation: Any, cli: CliRunner) -> dict[str, Any]:
    del cloudformation, cli
    _infrastructure(spec).cleanup(delete_stack=True, cleanup_environment=True)
    return {"stack_deleted": f"{spec['stack_name']}-NovaForgeSDK"}


HANDLERS: dict[str, Callable[..., dict[str, Any]]] = {
    "setup": setup,
    "submit": submit,
    "status": status,
    "cancel": cancel,
    "teardown": teardown,
}


def main(argv: Sequence[str] | None = None, *, session: boto3.Session | None = None, cli: CliRunner = run_cli) -> int:
    parser = argparse.ArgumentParser(prog="nova_runner", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("command", choices=COMMANDS)
    parser.add_argument("--spec", required=True, help="s3:// URI of the run's spec.json")
    args = parser.parse_args(argv)
    session = session or boto3.Session()
    s3 = session.client("s3")
    spec_uri = S3Uri.parse(args.spec)
    spec = json.loads(s3.get_object(Bucket=spec_uri.bucket, Key=spec_uri.key)["Body"].read())
    document: dict[str, Any] = {"command": args.command, "run_id": spec.get("run_id")}
    try:
        cloudformation = session.client("cloudformation", region_name=spec["region"])
        document["result"] = HANDLERS[args.command](spec, cloudformation=cloudformation, cli=cli)
        document["ok"] = True
    except Exception as error:  # the adapter reads the failure from the result file; nothing is swallowed
        document["ok"] = False
        document["error"] = f"{type(error).__name__}: {error}"
    now = time.time()
    document["finished_at"] = datetime.fromtimestamp(now, UTC).isoformat()
    document["finished_at_epoch"] = now
    result_uri = S3Uri.parse(spec["result_prefix"]).join(f"{args.command}.json")
    s3.put_object(
        Bucket=result_uri.bucket, Key=result_uri.key, Body=json.dumps(document, indent=2, default=str).encode()
    )
    print(json.dumps(document, default=str))
    return 0 if document["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
