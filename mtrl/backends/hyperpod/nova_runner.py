"""Entry point of the Nova Forge runner container: ``python -m mtrl.backends.hyperpod.nova_runner <command> --spec s3://…``.

The Nova Forge SDK (``amzn-nova-forge``, pinned in requirements/nova-runner.in) needs Python ≥ 3.12 and the HyperPod
CLI, so it runs here, in a task the ``hyperpod`` adapter starts, never in a Lambda. **This is the only module that
imports the SDK** (``_sdk()``, lazily, so importing the module never needs it). Each command reads the run's spec
(written by the adapter) and writes ``<result_prefix>/<command>.json``:
``{"command", "ok", "result" | "error", "finished_at", "finished_at_epoch"}``.

What each command calls (the SDK's public names, v1.4.10; the calls each makes are listed in docs/pipeline.md):

- ``setup``: ``RFTMultiturnInfrastructure(stack_name, region, infrastructure_arn=<ECS cluster>,
  custom_env=CustomEnvironment(env_id, s3_uri=<the environment's package>), rft_role_name, vpc_config).setup()``
  — the SDK deploys ``<stack_name>-NovaForgeSDK`` (queues, proxy/rollout Lambdas, table). Because CDK pre-attached
  ``<rft_role_name>Policy`` to this task's role, ``ensure_rft_policy_on_current_role`` returns early and never
  writes IAM. Endpoints are then read from the stack's outputs.
- ``submit``: ``ForgeTrainer(...).train(job_name, overrides, rft_multiturn_infra=infra)`` after ``setup()`` (which
  loads the stack outputs the recipe needs; idempotent). The job's name is what ``hyperpod start-job`` printed
  (``SMHPRuntimeManager.execute`` parses its ``NAME:`` line); it is written to ``submit.json``, and a retried
  submit returns the recorded name instead of starting a second job.
- ``status``: ``SMHPStatusManager(cluster, namespace).get_job_status(<recorded job name>)``.
- ``cancel``: ``SMHPRuntimeManager(...).cleanup(<recorded job name>)`` (``hyperpod cancel-job``).
- ``teardown``: ``RFTMultiturnInfrastructure(...).cleanup(cleanup_environment=True)`` stops the SDK's tasks and
  deregisters its task definitions, then the runner deletes ``<stack_name>-NovaForgeSDK`` itself: the SDK's
  ``cleanup(delete_stack=True)`` deletes only when ``setup()`` ran in the same process. The adapter's own cleanup
  deletes the stack too, so teardown never depends on this container.

Telemetry: the SDK sends an anonymous request per call unless ``TELEMETRY_OPT_OUT=true``; runs happen in customers'
accounts, so the runner opts out unless the run's settings say ``nova_forge_telemetry`` (off by default).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import time
import types
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import boto3
from botocore.exceptions import ClientError

from mtrl.backends._aws import S3Uri, error_code, short_token

COMMANDS = ("setup", "submit", "status", "cancel", "teardown")
SDK_STACK_SUFFIX = "NovaForgeSDK"  # what RFTMultiturnInfrastructure appends to the stack name it is given
TELEMETRY_ENV = "TELEMETRY_OPT_OUT"  # read by amzn_nova_forge.telemetry.telemetry_logging

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


def _sdk() -> types.SimpleNamespace:
    """The SDK's names this runner uses; the one place the SDK is imported (it exists only in .venv-nova/the image)."""
    import amzn_nova_forge  # type: ignore[import-not-found]  # noqa: PLC0415
    from amzn_nova_forge import rft_multiturn  # noqa: PLC0415
    from amzn_nova_forge.core import types as sdk_types  # type: ignore[import-not-found]  # noqa: PLC0415
    from amzn_nova_forge.core.result import job_result  # type: ignore[import-not-found]  # noqa: PLC0415

    return types.SimpleNamespace(
        version=importlib.metadata.version("amzn-nova-forge"),
        ForgeConfig=amzn_nova_forge.ForgeConfig,
        ForgeTrainer=amzn_nova_forge.ForgeTrainer,
        MLflowMonitor=amzn_nova_forge.MLflowMonitor,
        Model=amzn_nova_forge.Model,
        SMHPRuntimeManager=amzn_nova_forge.SMHPRuntimeManager,
        TrainingMethod=amzn_nova_forge.TrainingMethod,
        SMHPStatusManager=job_result.SMHPStatusManager,
        ValidationConfig=sdk_types.ValidationConfig,
        CustomEnvironment=rft_multiturn.CustomEnvironment,
        RFTMultiturnInfrastructure=rft_multiturn.RFTMultiturnInfrastructure,
    )


def job_name(spec: Mapping[str, Any]) -> str:
    """The name mtrl asks for (``ForgeTrainer.train(job_name=…)``); the SDK appends a random suffix, and the job's
    real name is what ``hyperpod start-job`` printed (recorded in ``submit.json``)."""
    return f"mtrl-{short_token(str(spec['run_id']), 16)}"


def apply_telemetry_choice(spec: Mapping[str, Any], environ: dict[str, str] | None = None) -> None:
    """Opt out of the SDK's telemetry unless the run opted in (must run before the SDK is imported)."""
    target = os.environ if environ is None else environ
    target[TELEMETRY_ENV] = "false" if spec.get("nova_forge_telemetry") else "true"


def _infrastructure(spec: Mapping[str, Any]) -> Any:
    sdk = _sdk()
    if not spec.get("custom_env_s3_uri"):
        raise ValueError(
            f"run {spec.get('run_id')}: environment '{spec.get('environment')}' has no Nova Forge package "
            "(custom_env_s3_uri); the deployment packages every environment it serves"
        )
    # Every mtrl environment, wordle included, is our own package (mtrl.envs.nova_package, uploaded by the stack):
    # VFEnvId.WORDLE would make the SDK install the starter kit's wordle, not the code mtrl validated the dataset
    # with. Multi-turn verifiers environments, so env_type="multi_turn".
    environment = sdk.CustomEnvironment(
        env_id=spec["environment"], s3_uri=spec["custom_env_s3_uri"], env_type="multi_turn"
    )
    return sdk.RFTMultiturnInfrastructure(
        stack_name=spec["stack_name"],
        region=spec["region"],
        infrastructure_arn=spec["ecs_cluster_arn"],
        rft_role_name=spec["rft_role_name"],
        vpc_config=spec.get("vpc_config"),
        custom_env=environment,
    )


def stack_outputs(cloudformation: Any, stack_name: str) -> dict[str, str]:
    stack = cloudformation.describe_stacks(StackName=f"{stack_name}-{SDK_STACK_SUFFIX}")["Stacks"][0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    missing = [key for key in ("RolloutQueueUrl", "ProxyFunctionUrl") if key not in outputs]
    if missing:
        raise RuntimeError(f"stack {stack_name}-{SDK_STACK_SUFFIX} has no output(s) {missing}")
    return {ours: outputs[theirs] for theirs, ours in STACK_OUTPUTS.items() if theirs in outputs}


class Context:
    """What a command needs besides the spec: the run's clients and its earlier results."""

    def __init__(self, session: boto3.Session, spec: Mapping[str, Any]) -> None:
        self.cloudformation = session.client("cloudformation", region_name=spec["region"])
        self.s3 = session.client("s3", region_name=spec["region"])
        self.result_prefix = S3Uri.parse(spec["result_prefix"])

    def earlier_result(self, command: str) -> dict[str, Any] | None:
        uri = self.result_prefix.join(f"{command}.json")
        try:
            document = json.loads(self.s3.get_object(Bucket=uri.bucket, Key=uri.key)["Body"].read())
        except ClientError as error:
            if error_code(error) in {"NoSuchKey", "404"}:
                return None
            raise
        return document if isinstance(document, dict) else None

    def write_result(self, command: str, document: Mapping[str, Any]) -> None:
        uri = self.result_prefix.join(f"{command}.json")
        self.s3.put_object(Bucket=uri.bucket, Key=uri.key, Body=json.dumps(document, indent=2, default=str).encode())


def recorded_job_name(spec: Mapping[str, Any], context: Context) -> str:
    """The HyperPod job's name: the adapter passes it (``job_name`` in the spec); else the one submit recorded."""
    if spec.get("job_name"):
        return str(spec["job_name"])
    submitted = context.earlier_result("submit")
    name = ((submitted or {}).get("result") or {}).get("job_name") if (submitted or {}).get("ok") else None
    if not name:
        raise RuntimeError(f"run {spec.get('run_id')} has no submitted HyperPod job (no job_name, no submit.json)")
    return str(name)


def setup(spec: Mapping[str, Any], context: Context) -> dict[str, Any]:
    _infrastructure(spec).setup()
    return stack_outputs(context.cloudformation, spec["stack_name"])


def _runtime(spec: Mapping[str, Any]) -> Any:
    # SMHPRuntimeManager.__init__ runs `hyperpod connect-cluster` (which runs `aws eks update-kubeconfig`).
    return _sdk().SMHPRuntimeManager(
        instance_type=spec["instance_type"],
        instance_count=spec["instance_count"],
        cluster_name=spec["hyperpod_cluster_name"],
        namespace=spec["namespace"],
    )


def submit(spec: Mapping[str, Any], context: Context) -> dict[str, Any]:
    earlier = context.earlier_result("submit")
    if earlier and earlier.get("ok") and (earlier.get("result") or {}).get("job_name"):
        # A retried submit (the task restarted, the pipeline retried) finds the job it already started.
        return {**earlier["result"], "reused": True}
    sdk = _sdk()
    infrastructure = _infrastructure(spec)
    infrastructure.setup()  # loads the stack outputs the trainer injects into the recipe
    name = job_name(spec)
    monitor = (
        sdk.MLflowMonitor(tracking_uri=spec["mlflow_tracking_arn"], experiment_name="mtrl", run_name=name)
        if spec.get("mlflow_tracking_arn")
        else None
    )
    trainer = sdk.ForgeTrainer(
        model=sdk.Model[spec["model"]],
        method=sdk.TrainingMethod[spec["training_method"]],
        infra=_runtime(spec),
        training_data_s3_path=spec["dataset_uri"],
        config=sdk.ForgeConfig(
            output_s3_path=spec["output_uri"],
            mlflow_monitor=monitor,
            # The SDK's IAM pre-check (Validator._validate_iam_permissions) simulates the caller's policy with
            # iam:SimulatePrincipalPolicy and demands s3:CreateBucket on the data bucket, which CDK owns and the
            # runner must never be able to create. The runner's real calls are checked against its synthesized
            # policy by tests/contract instead; infrastructure and recipe validation stay on.
            validation_config=sdk.ValidationConfig(iam=False, infra=True, recipe=True),
        ),
    )
    result = trainer.train(
        job_name=name, overrides=dict(spec.get("overrides") or {}), rft_multiturn_infra=infrastructure
    )
    started = str(getattr(result, "job_id", "") or "")
    if not started:
        raise RuntimeError(f"the SDK started no job for {name} (no job id returned)")
    # Recorded at once, before anything else can fail, so a retry never starts a second job.
    context.write_result("submit", _document("submit", spec, {"ok": True, "result": {"job_name": started}}))
    return {"job_name": started}


def status(spec: Mapping[str, Any], context: Context) -> dict[str, Any]:
    name = recorded_job_name(spec, context)
    manager = _sdk().SMHPStatusManager(cluster_name=spec["hyperpod_cluster_name"], namespace=spec["namespace"])
    job_status, raw = manager.get_job_status(name)
    return {"job_name": name, "state": str(raw), "sdk_status": str(job_status.value), "message": str(raw)}


def cancel(spec: Mapping[str, Any], context: Context) -> dict[str, Any]:
    name = recorded_job_name(spec, context)
    _runtime(spec).cleanup(name)
    return {"job_name": name, "cancelled": True}


def teardown(spec: Mapping[str, Any], context: Context) -> dict[str, Any]:
    _infrastructure(spec).cleanup(delete_stack=False, cleanup_environment=True)
    stack = f"{spec['stack_name']}-{SDK_STACK_SUFFIX}"
    try:
        context.cloudformation.describe_stacks(StackName=stack)
    except ClientError as error:
        if "does not exist" in str(error):
            return {"stack_deleted": stack, "already_gone": True}
        raise
    context.cloudformation.delete_stack(StackName=stack)
    return {"stack_deleted": stack}


HANDLERS: dict[str, Callable[[Mapping[str, Any], Context], dict[str, Any]]] = {
    "setup": setup,
    "submit": submit,
    "status": status,
    "cancel": cancel,
    "teardown": teardown,
}


def _document(command: str, spec: Mapping[str, Any], outcome: Mapping[str, Any]) -> dict[str, Any]:
    now = time.time()
    return {
        "command": command,
        "run_id": spec.get("run_id"),
        **outcome,
        "finished_at": datetime.fromtimestamp(now, UTC).isoformat(),
        "finished_at_epoch": now,
    }


def main(argv: Sequence[str] | None = None, *, session: boto3.Session | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nova_runner", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("command", choices=COMMANDS)
    parser.add_argument("--spec", required=True, help="s3:// URI of the run's spec.json")
    args = parser.parse_args(argv)
    session = session or boto3.Session()
    spec_uri = S3Uri.parse(args.spec)
    spec = json.loads(session.client("s3").get_object(Bucket=spec_uri.bucket, Key=spec_uri.key)["Body"].read())
    apply_telemetry_choice(spec)
    context = Context(session, spec)
    try:
        outcome: dict[str, Any] = {"ok": True, "result": HANDLERS[args.command](spec, context)}
    except Exception as error:  # the adapter reads the failure from the result file; nothing is swallowed
        outcome = {"ok": False, "error": f"{type(error).__name__}: {error}"}
    document = _document(args.command, spec, outcome)
    context.write_result(args.command, document)
    print(json.dumps(document, default=str))
    return 0 if document["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
