"""The Nova Forge runner entry module, with a fake ``amzn_nova_forge`` injected in ``sys.modules`` (the real SDK
needs Python ≥ 3.12 and a Nova Forge subscription)."""

from __future__ import annotations

import enum
import json
import subprocess
import sys
import types
from collections.abc import Sequence
from typing import Any

import pytest
from aws_fakes import REGION, FakeAws

from mtrl.backends import nova_runner

BUCKET = "mtrl-data-123456789012"
SPEC_KEY = "runs/r1/backend/spec.json"
STACK = "mtrl-run-r1"


class FakeSdk:
    """Records what the runner asks of the SDK."""

    def __init__(self, aws: FakeAws) -> None:
        self.aws = aws
        self.calls: list[tuple[str, Any]] = []
        self.fail_setup: Exception | None = None
        sdk = self

        class VFEnvId(enum.Enum):
            WORDLE = "wordle"
            TERMINAL_BENCH = "terminalbench_env"

        class CustomEnvironment:
            def __init__(self, **kwargs: Any) -> None:
                sdk.calls.append(("CustomEnvironment", kwargs))

        class RFTMultiturnInfrastructure:
            def __init__(self, **kwargs: Any) -> None:
                sdk.calls.append(("RFTMultiturnInfrastructure", kwargs))
                self.stack_name = kwargs["stack_name"]

            def setup(self) -> None:
                sdk.calls.append(("setup", self.stack_name))
                if sdk.fail_setup:
                    raise sdk.fail_setup
                cfn = sdk.aws.session.client("cloudformation")
                name = f"{self.stack_name}-NovaForgeSDK"
                if not cfn.list_stacks(StackStatusFilter=["CREATE_COMPLETE"])["StackSummaries"]:
                    cfn.create_stack(
                        StackName=name,
                        TemplateBody=json.dumps(
                            {
                                "Resources": {"Q": {"Type": "AWS::SQS::Queue"}},
                                "Outputs": {
                                    "RolloutQueueUrl": {"Value": {"Ref": "Q"}},
                                    "ProxyFunctionUrl": {"Value": "https://p.lambda-url.us-east-1.on.aws/"},
                                    "TasksTableName": {"Value": "tasks"},
                                },
                            }
                        ),
                    )

            def cleanup(self, **kwargs: Any) -> None:
                sdk.calls.append(("cleanup", kwargs))

        class Model(enum.Enum):
            NOVA_LITE_2 = "nova-lite-2"

        class TrainingMethod(enum.Enum):
            RFT_MULTITURN_LORA = "rft_multiturn_lora"
            RFT_MULTITURN_FULL = "rft_multiturn_full"

        def recorder(name: str) -> type:
            class Recorded:
                def __init__(self, **kwargs: Any) -> None:
                    self.kwargs = kwargs
                    sdk.calls.append((name, kwargs))

            return Recorded

        class ForgeTrainer(recorder("ForgeTrainer")):  # type: ignore[misc]
            def train(self, **kwargs: Any) -> Any:
                sdk.calls.append(("train", kwargs))
                return types.SimpleNamespace(job_id=kwargs["job_name"])

        top = types.ModuleType("amzn_nova_forge")
        top.ForgeTrainer = ForgeTrainer  # type: ignore[attr-defined]
        top.ForgeConfig = recorder("ForgeConfig")  # type: ignore[attr-defined]
        top.MLflowMonitor = recorder("MLflowMonitor")  # type: ignore[attr-defined]
        top.SMHPRuntimeManager = recorder("SMHPRuntimeManager")  # type: ignore[attr-defined]
        top.Model = Model  # type: ignore[attr-defined]
        top.TrainingMethod = TrainingMethod  # type: ignore[attr-defined]
        sub = types.ModuleType("amzn_nova_forge.rft_multiturn")
        sub.RFTMultiturnInfrastructure = RFTMultiturnInfrastructure  # type: ignore[attr-defined]
        sub.CustomEnvironment = CustomEnvironment  # type: ignore[attr-defined]
        sub.VFEnvId = VFEnvId  # type: ignore[attr-defined]
        self.modules = {"amzn_nova_forge": top, "amzn_nova_forge.rft_multiturn": sub}

    def named(self, name: str) -> list[Any]:
        return [args for call, args in self.calls if call == name]


@pytest.fixture
def sdk(aws: FakeAws, monkeypatch: pytest.MonkeyPatch) -> FakeSdk:
    fake = FakeSdk(aws)
    for name, module in fake.modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    aws.session.client("s3").create_bucket(Bucket=BUCKET)
    return fake


def write_spec(aws: FakeAws, **overrides: Any) -> str:
    spec = {
        "run_id": "r1",
        "region": REGION,
        "stack_name": STACK,
        "rft_role_name": "mtrl-rft",
        "ecs_cluster_arn": "arn:aws:ecs:us-east-1:123456789012:cluster/mtrl-rewards",
        "vpc_config": {"subnets": ["subnet-1"], "security_groups": ["sg-1"]},
        "environment": "wordle",
        "environment_args": {},
        "custom_env_s3_uri": None,
        "hyperpod_cluster_name": "mtrl-hp",
        "namespace": "kubeflow",
        "instance_type": "ml.p5.48xlarge",
        "instance_count": 2,
        "model": "NOVA_LITE_2",
        "training_method": "RFT_MULTITURN_LORA",
        "overrides": {"max_steps": 10},
        "dataset_uri": f"s3://{BUCKET}/training-data/wordle.jsonl",
        "output_uri": f"s3://{BUCKET}/runs/r1/model/",
        "mlflow_tracking_arn": None,
        "result_prefix": f"s3://{BUCKET}/runs/r1/backend",
        **overrides,
    }
    aws.session.client("s3").put_object(Bucket=BUCKET, Key=SPEC_KEY, Body=json.dumps(spec).encode())
    return f"s3://{BUCKET}/{SPEC_KEY}"


def result(aws: FakeAws, command: str) -> dict[str, Any]:
    body = aws.session.client("s3").get_object(Bucket=BUCKET, Key=f"runs/r1/backend/{command}.json")["Body"].read()
    return json.loads(body)  # type: ignore[no-any-return]


class Cli:
    def __init__(self, outputs: dict[str, str] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.outputs = outputs or {}

    def __call__(self, args: Sequence[str]) -> str:
        self.calls.append(list(args))
        return self.outputs.get(args[1], "")


def test_importing_the_runner_does_not_import_the_sdk() -> None:
    code = "import sys, mtrl.backends.nova_runner; print('amzn_nova_forge' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_setup_deploys_through_the_sdk_and_reports_stack_outputs(aws: FakeAws, sdk: FakeSdk) -> None:
    assert nova_runner.main(["setup", "--spec", write_spec(aws)], session=aws.session, cli=Cli()) == 0
    (kwargs,) = sdk.named("RFTMultiturnInfrastructure")
    assert kwargs["stack_name"] == STACK
    assert kwargs["infrastructure_arn"].startswith("arn:aws:ecs:")  # reward platform ECS, never LOCAL in a task
    assert kwargs["rft_role_name"] == "mtrl-rft"
    assert kwargs["vf_env_id"].value == "wordle"
    document = result(aws, "setup")
    assert document["ok"] is True
    assert document["result"]["proxy_function_url"] == "https://p.lambda-url.us-east-1.on.aws/"
    assert document["result"]["rollout_request_queue_url"].startswith("https://")
    assert document["result"]["dynamo_table_name"] == "tasks"


def test_custom_environment_and_unknown_builtin(aws: FakeAws, sdk: FakeSdk) -> None:
    uri = write_spec(aws, environment="ask_to_code", custom_env_s3_uri=f"s3://{BUCKET}/envs/ask_to_code.tar.gz")
    assert nova_runner.main(["setup", "--spec", uri], session=aws.session, cli=Cli()) == 0
    assert sdk.named("CustomEnvironment")[0]["env_id"] == "ask_to_code"
    uri = write_spec(aws, environment="ask_to_code")
    assert nova_runner.main(["setup", "--spec", uri], session=aws.session, cli=Cli()) == 1
    assert "not a Nova Forge built-in" in result(aws, "setup")["error"]


def test_submit_trains_with_the_run_settings(aws: FakeAws, sdk: FakeSdk) -> None:
    assert nova_runner.main(["submit", "--spec", write_spec(aws)], session=aws.session, cli=Cli()) == 0
    assert sdk.named("setup") == [STACK]  # loads the stack outputs before training
    (runtime,) = sdk.named("SMHPRuntimeManager")
    assert runtime == {
        "instance_type": "ml.p5.48xlarge",
        "instance_count": 2,
        "cluster_name": "mtrl-hp",
        "namespace": "kubeflow",
    }
    (trainer,) = sdk.named("ForgeTrainer")
    assert trainer["model"].name == "NOVA_LITE_2"
    assert trainer["method"].name == "RFT_MULTITURN_LORA"
    assert trainer["training_data_s3_path"] == f"s3://{BUCKET}/training-data/wordle.jsonl"
    (train,) = sdk.named("train")
    assert train["overrides"] == {"max_steps": 10}
    assert train["job_name"] == nova_runner.job_name({"run_id": "r1"})
    assert result(aws, "submit")["result"] == {"job_name": train["job_name"]}


def test_status_and_cancel_use_the_hyperpod_cli(aws: FakeAws, sdk: FakeSdk) -> None:
    job = {"Status": {"conditions": [{"type": "Created"}, {"type": "Running", "message": "step 4"}], "startTime": "t"}}
    cli = Cli({"get-job": json.dumps(job)})
    uri = write_spec(aws)
    assert nova_runner.main(["status", "--spec", uri], session=aws.session, cli=cli) == 0
    assert cli.calls[0][:2] == ["hyperpod", "connect-cluster"]
    assert result(aws, "status")["result"]["state"] == "Running"
    assert result(aws, "status")["result"]["message"] == "step 4"
    assert nova_runner.main(["status", "--spec", uri], session=aws.session, cli=Cli({"get-job": "{}"})) == 0
    assert result(aws, "status")["result"]["state"] == "Pending"
    cancel_cli = Cli()
    assert nova_runner.main(["cancel", "--spec", uri], session=aws.session, cli=cancel_cli) == 0
    assert cancel_cli.calls[-1][:3] == ["hyperpod", "cancel-job", "--job-name"]
    assert sdk.calls == []  # status and cancel never touch the SDK


def test_failures_are_written_not_swallowed(aws: FakeAws, sdk: FakeSdk) -> None:
    sdk.fail_setup = RuntimeError("Cannot use stack - queues are not empty")
    assert nova_runner.main(["setup", "--spec", write_spec(aws)], session=aws.session, cli=Cli()) == 1
    document = result(aws, "setup")
    assert document["ok"] is False
    assert document["error"] == "RuntimeError: Cannot use stack - queues are not empty"


def test_teardown_deletes_through_the_sdk(aws: FakeAws, sdk: FakeSdk) -> None:
    assert nova_runner.main(["teardown", "--spec", write_spec(aws)], session=aws.session, cli=Cli()) == 0
    assert sdk.named("cleanup") == [{"delete_stack": True, "cleanup_environment": True}]


def test_unknown_command_is_a_usage_error(aws: FakeAws) -> None:
    with pytest.raises(SystemExit) as caught:
        nova_runner.main(["train", "--spec", "s3://b/k"], session=aws.session)
    assert caught.value.code == 2
