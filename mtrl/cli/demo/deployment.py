"""The demo's deployment inside the emulator: its stacks' outputs, its runs and their outputs in the data bucket, and
the `mtrl` command aimed at it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from mtrl.cli.demo import REPO_ROOT
from mtrl.client import runs as client_runs
from mtrl.client.deployment import Deployment
from mtrl.emulator import Emulator
from mtrl.emulator.process import REGION

PREFIX = "mtrl"


# What the `mtrl` command needs to reach the emulator: its fixed dummy credentials (mtrl.emulator.process) and region.
EMULATOR_CLI_ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_DEFAULT_REGION": REGION,
}


def cli_hints(endpoint_url: str) -> list[str]:
    """How to reach a kept emulator from another shell, as `mtrl demo --keep-emulator` prints it (docs/emulator.md)."""
    exports = " ".join(f"{name}={value}" for name, value in EMULATOR_CLI_ENVIRONMENT.items())
    return [
        f"export {exports}   # the emulator's dummy credentials and region",
        f"mtrl runs --endpoint-url {endpoint_url} --prefix {PREFIX}",
        f"mtrl status RUN_ID --endpoint-url {endpoint_url} --prefix {PREFIX}",
        f"aws --endpoint-url {endpoint_url} s3 ls   # the AWS CLI too",
    ]


def run_mtrl(args: list[str], emulator: Emulator, *, capture: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the `mtrl` command as a user would, aimed at the emulator."""
    env = {**os.environ, **EMULATOR_CLI_ENVIRONMENT, "AWS_EC2_METADATA_DISABLED": "true"}
    command = [sys.executable, "-m", "mtrl", *args, "--endpoint-url", emulator.endpoint_url, "--prefix", PREFIX]
    return subprocess.run(command, cwd=REPO_ROOT, env=env, text=True, capture_output=capture, check=False)


def run_ids(session: Any) -> list[str]:
    """The deployment's run ids, newest first: what `mtrl runs --json` lists (the same query, in this process; the
    demo only reads them, so it starts no interpreter for it, once after the run and once a second for the
    malformed upload's run)."""
    data, pipeline = stack_outputs(session, f"{PREFIX}-data"), stack_outputs(session, f"{PREFIX}-pipeline")
    deployment = Deployment(
        prefix=PREFIX,
        region=REGION,
        bucket=data["DataBucketName"],
        run_table=data["RunTableName"],
        state_machine_arn=pipeline["StateMachineArn"],
        topic_arn=pipeline["NotificationTopicArn"],
    )
    records = client_runs.list_runs(session.client("dynamodb"), deployment)
    return [str(client_runs.run_view(record)["run_id"]) for record in records]


def stack_outputs(session: Any, stack_name: str) -> dict[str, str]:
    outputs = session.client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"][0]["Outputs"]
    return {str(o["OutputKey"]): str(o["OutputValue"]) for o in outputs}


def data_bucket(session: Any) -> str:
    return stack_outputs(session, f"{PREFIX}-data")["DataBucketName"]


def read_json(s3: Any, bucket: str, key: str) -> dict[str, Any]:
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    parsed: dict[str, Any] = json.loads(body)
    return parsed


def read_optional_json(s3: Any, bucket: str, key: str) -> dict[str, Any] | None:
    try:
        return read_json(s3, bucket, key)
    except s3.exceptions.NoSuchKey:
        return None


# What step 4 copies out of the emulator (it stops when the demo ends): the pipeline's and the trainer's summaries
# and the per-step signal rows the training-health rules read.
FETCHED_OUTPUTS = ("summary.json", "signals.jsonl", "health.json", "local/summary.json")


def fetch_outputs(s3: Any, bucket: str, run_id: str, work_dir: Path) -> list[Path]:
    fetched: list[Path] = []
    for name in FETCHED_OUTPUTS:
        try:
            body = s3.get_object(Bucket=bucket, Key=f"runs/{run_id}/{name}")["Body"].read()
        except s3.exceptions.NoSuchKey:
            continue
        target = work_dir / run_id / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(body)
        fetched.append(target)
    return fetched


def fetch_plot(s3: Any, bucket: str, run_id: str, work_dir: Path) -> Path | None:
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"runs/{run_id}/")
    keys = [item["Key"] for item in listed.get("Contents", []) if item["Key"].endswith(".png")]
    if not keys:
        return None
    target = work_dir / f"{run_id}.png"
    target.write_bytes(s3.get_object(Bucket=bucket, Key=keys[0])["Body"].read())
    return target
