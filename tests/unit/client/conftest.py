"""A deployed mtrl in moto: the stacks' outputs as real CloudFormation stacks, and the resources they name.

Every AWS call goes to moto (``mock_aws``) with fake credentials; no test can reach a real account.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from mtrl.client.deployment import Deployment
from mtrl.runs.manifest import RunSettings
from mtrl.runs.registry import RunRegistry, RunStatus
from mtrl.runs.runtime import Runtime
from mtrl.settings.pipeline import PipelineSettings
from tests.aws_fixtures import REGION, create_versioned_bucket
from tests.run_table import create_run_table

PREFIX = "mtrl"
BUCKET = "mtrl-data-bucket-test"
TABLE = "mtrl-runs-test"
LOG_GROUPS = ("/mtrl/pipeline/trigger", "/mtrl/pipeline/backend", "/mtrl/pipeline/state-machine")
SAMPLE = Path(__file__).resolve().parents[3] / "environments" / "wordle" / "sample" / "train.jsonl"
_PASS_MACHINE = json.dumps({"StartAt": "Wait", "States": {"Wait": {"Type": "Pass", "End": True}}})


@pytest.fixture
def aws_env(aws_credentials: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The fake identity, and no user configuration files or instance metadata: nothing here can use a real profile."""
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("COLUMNS", "200")  # Rich reads it: tables are not squeezed to 80 columns
    monkeypatch.setattr(boto3, "Session", _session_with_shared_loader)


_SESSION = boto3.Session
_shared_loader: list[Any] = []


def _session_with_shared_loader(*args: Any, **kwargs: Any) -> boto3.Session:
    """Every command builds a fresh session, and parsing the service models is most of a command's CPU time:
    share one loader (it caches parsed models) so the tests stay fast. Behaviour is otherwise unchanged."""
    session = _SESSION(*args, **kwargs)
    core = session._session  # boto3 exposes no public way to share botocore's loader
    if _shared_loader:
        core.register_component("data_loader", _shared_loader[0])
    else:
        _shared_loader.append(core.get_component("data_loader"))
    return session


def _stack(cloudformation: Any, name: str, outputs: dict[str, str]) -> None:
    template = {
        "Resources": {"Marker": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    cloudformation.create_stack(StackName=name, TemplateBody=json.dumps(template))


@dataclass
class Fake:
    """The moto deployment: its names, clients and a registry writing records with the pipeline's own code."""

    deployment: Deployment
    s3: Any
    dynamodb: Any
    stepfunctions: Any
    logs: Any
    cloudformation: Any
    sns: Any

    @property
    def registry(self) -> RunRegistry:
        return RunRegistry(self.dynamodb, self.deployment.run_table)

    def runtime(self) -> Runtime:
        return Runtime(
            dynamodb=self.dynamodb,
            s3=self.s3,
            table=self.deployment.run_table,
            bucket=self.deployment.bucket,
            settings=PipelineSettings.model_validate({}),
            sns=self.sns,
            stepfunctions=self.stepfunctions,
            topic_arn=self.deployment.topic_arn,
            state_machine_arn=self.deployment.state_machine_arn,
        )

    def add_stack(self, name: str, outputs: dict[str, str]) -> None:
        _stack(self.cloudformation, name, outputs)

    def seed_run(
        self,
        run_id: str,
        *,
        created_at: str = "2026-11-29T10:00:00.000Z",
        status: RunStatus = RunStatus.TRAINING,
        backend: str = "local",
        execution_arn: str | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """A run record as the pipeline phases write it: register, settings, phases, then ``fields``."""
        registry = RunRegistry(self.dynamodb, self.deployment.run_table, clock=lambda: created_at)
        registry.create(
            run_id,
            {
                "execution_arn": execution_arn,
                "dataset": {
                    "bucket": self.deployment.bucket,
                    "key": f"training-data/{run_id.split('-2026', maxsplit=1)[0]}.jsonl",
                    "version_id": "v1",
                    "uri": f"s3://{self.deployment.bucket}/training-data/x.jsonl",
                },
            },
        )
        settings = RunSettings.model_validate(
            {
                "backend": backend,
                "environment": "wordle",
                "instance_count": 1,
                "worker_count": 0,
                "eval_split": 0.0,
                "run_timeout_minutes": 60,
            }
        )
        registry.set_fields(run_id, settings=settings.model_dump(mode="json"))
        registry.set_status(run_id, RunStatus.REGISTERED, phase="register")
        registry.end_phase(run_id, "register")
        if status is not RunStatus.REGISTERED:
            registry.set_status(run_id, RunStatus.VALIDATING, phase="validate")
            registry.end_phase(run_id, "validate")
            registry.set_status(run_id, RunStatus.TRAINING, phase="train")
        if fields:
            registry.set_fields(run_id, **fields)
        if status.terminal:
            registry.end_phase(run_id, "train", "ok" if status is RunStatus.SUCCEEDED else "failed")
            error = None
            if status is not RunStatus.SUCCEEDED:
                error = {"step": "Train", "error": "JobFailed", "cause": "the training job failed"}
            registry.finish(run_id, status, error=error)
        return registry.get(run_id)


@pytest.fixture
def fake(aws_env: None, mocked_aws: None) -> Fake:
    session = boto3.Session(region_name=REGION)
    s3 = session.client("s3")
    create_versioned_bucket(s3, BUCKET)
    dynamodb = session.client("dynamodb")
    create_run_table(dynamodb, TABLE, listed=True)
    iam = session.client("iam")
    role = iam.create_role(
        RoleName="machine",
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "states.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
    )["Role"]["Arn"]
    stepfunctions = session.client("stepfunctions")
    machine = stepfunctions.create_state_machine(name="mtrl-run", definition=_PASS_MACHINE, roleArn=role)
    sns = session.client("sns")
    topic = sns.create_topic(Name="mtrl-notifications")["TopicArn"]
    logs = session.client("logs")
    for group in LOG_GROUPS:
        logs.create_log_group(logGroupName=group)
    cloudformation = session.client("cloudformation")
    _stack(cloudformation, f"{PREFIX}-data", {"DataBucketName": BUCKET, "RunTableName": TABLE, "DataKeyArn": "k"})
    _stack(
        cloudformation,
        f"{PREFIX}-pipeline",
        {
            "StateMachineArn": machine["stateMachineArn"],
            "NotificationTopicArn": topic,
            "DashboardName": "mtrl-pipeline",
            "LogGroupNames": ",".join(LOG_GROUPS),
        },
    )
    deployment = Deployment(
        prefix=PREFIX,
        region=REGION,
        bucket=BUCKET,
        run_table=TABLE,
        state_machine_arn=machine["stateMachineArn"],
        topic_arn=topic,
        log_groups=LOG_GROUPS,
    )
    return Fake(deployment, s3, dynamodb, stepfunctions, logs, cloudformation, sns)


@pytest.fixture
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[], object]], list[int]]:
    """Replace the commands' sleep with ``step`` (which moves the fake pipeline on); returns the call log."""

    def install(step: Callable[[], object]) -> list[int]:
        calls: list[int] = []

        def fake_sleep(_seconds: float) -> None:
            calls.append(1)
            step()

        monkeypatch.setattr("mtrl.cli.runs_cmd.sleep", fake_sleep)
        return calls

    return install
