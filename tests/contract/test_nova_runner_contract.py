"""The Nova Forge runner against the real SDK (amzn-nova-forge, pinned in requirements/nova-runner.txt).

Each command runs the runner's real entry point,
``python -m mtrl.backends.hyperpod.nova_runner <command> --spec s3://…``, in
``.venv-nova`` (the image's Python environment, ``make nova``) as a subprocess, with AWS faked at botocore's level
inside that process (tests/contract/nova/fakeenv: every call recorded, requests and responses validated against the
service models, state kept between processes) and a fake ``hyperpod`` CLI first on PATH
(tests/contract/nova/bin/hyperpod, running fake_hyperpod.py: argv recorded, output as the SDK's parsers read it).
The assertions are on the recorded calls and argv; nothing of the SDK is mocked. Every recorded call must be allowed
by the runner role's synthesized policy (the IAM contract, tests/contract/iam_contract.py). Names (bucket, roles, ECS
cluster, HyperPod cluster) come from the synthesized app.

In CI (CI=true) a missing .venv-nova fails these tests; elsewhere they are skipped with the reason.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mtrl.backends.hyperpod import CAPACITY_KIND, HyperPodAdapter, parse_settings, run_name_pattern, sdk_stack_name
from mtrl.contracts.backend import CreatedResource, RunContext
from mtrl.envs.nova_package import build_package
from tests.aws_fixtures import fake_credentials
from tests.contract.forked_runs import ForkServer, Run
from tests.contract.iam_contract import AppModel, AwsCall, assert_calls_allowed
from tests.contract.nova import NOVA_SDK_PRELOAD, bytecode_cache
from tests.contract.tier import skip_or_fail

ROOT = Path(__file__).resolve().parents[2]
NOVA_PYTHON = ROOT / ".venv-nova" / "bin" / "python"
NOVA_DIR = Path(__file__).resolve().parent / "nova"
RUNNER_ROLE = "mtrl-backends/Roles/NovaRunnerRole"
RFT_ROLE = "mtrl-backends/Roles/RftRole"
STARTER_KIT_BUCKET = "nova-rft-starter-kit-c7363-206080352451-us-east-1"  # rft_multiturn/constants.py STARTER_KIT_S3
FORGE_RECIPES_BUCKET = "nova-forge-c7363-206080352451-us-east-1"  # RFTMultiturnInfrastructure.get_recipe_path
FORGE_RECIPE_KEY = (
    "v1/src/hyperpod_cli/sagemaker_hyperpod_recipes/recipes_collection/recipes/"
    "fine-tuning/nova/forge/nova_2_0/nova_lite/RFT/nova_lite_2_0_p5_gpu_lora_rft_byoo.yaml"
)
JUMPSTART_BUCKET = "jumpstart-cache-prod-us-east-1"
INSTANCE_TYPE = "ml.p5.48xlarge"
RUN_ID = "wordle-2026-12-01T10-00-00Z-contract"

if not NOVA_PYTHON.exists():
    skip_or_fail(".venv-nova is missing: run `make nova` (needs Python >= 3.12)", module_level=True)


class _S3Capture:
    """Stands in for AwsClients so the real adapter writes the spec the runner reads."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def client(self, service: str, region: str | None = None) -> _S3Capture:
        assert service == "s3", service
        return self

    def put_object(self, *, Bucket: str, Key: str, Body: bytes) -> dict[str, Any]:
        path = self.root / Bucket / Key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(Body)
        return {}


@dataclass
class Sandbox:
    """One fake account for a sequence of runner commands."""

    root: Path
    world: dict[str, Any]
    settings: dict[str, Any]
    server: ForkServer | None = None  # runs each command as a fork of one .venv-nova interpreter
    spec_uri: str = ""
    commands: list[str] = field(default_factory=list)

    @property
    def state(self) -> Path:
        return self.root / "state"

    def put(self, bucket: str, key: str, body: bytes | str) -> None:
        path = self.state / "s3" / bucket / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body.encode() if isinstance(body, str) else body)

    def s3_json(self, bucket: str, key: str) -> dict[str, Any]:
        return json.loads((self.state / "s3" / bucket / key).read_text())  # type: ignore[no-any-return]

    def write_spec(self, **run_settings: Any) -> None:
        run = RunContext(
            run_id=RUN_ID,
            settings={**self.settings, **run_settings},
            dataset_uri=f"s3://{self.world['data_bucket']}/training-data/wordle.jsonl",
            eval_dataset_uri=None,
            output_uri=f"s3://{self.world['data_bucket']}/runs/{RUN_ID}/",
            # The adapter's scale-up record, which the spec takes the instance type from.
            resources=(CreatedResource(CAPACITY_KIND, "c/g", {"instance_type": INSTANCE_TYPE}),),
            record_resource=lambda _r: None,
        )
        adapter = HyperPodAdapter(_S3Capture(self.state / "s3"))  # type: ignore[arg-type]
        self.spec_uri = str(adapter._write_spec(run, parse_settings(run.settings)))

    def environ(self, **env: str) -> dict[str, str]:
        site = self.root / "site"
        return {
            "PATH": f"{NOVA_DIR / 'bin'}:{os.environ['PATH']}",
            "PYTHONPATH": f"{NOVA_DIR / 'fakeenv'}:{site}",
            "HOME": str(self.root / "home"),
            "NOVA_FAKE_AWS": str(self.state),
            "FAKE_HYPERPOD_RECIPES": str(
                site / "hyperpod_cli" / "sagemaker_hyperpod_recipes/recipes_collection/recipes"
            ),
            **fake_credentials("us-east-1"),  # the fake never checks them
            "FAKE_HYPERPOD_PYTHON": str(NOVA_PYTHON),  # what bin/hyperpod runs the fake CLI with
            **bytecode_cache(),
            **env,
        }

    def run(self, command: str, **env: str) -> dict[str, Any]:
        """Run the runner's entry point in .venv-nova; returns the result document it wrote."""
        completed = self.python(
            "-m", "mtrl.backends.hyperpod.nova_runner", command, "--spec", self.spec_uri, env=self.environ(**env)
        )
        self.commands.append(command)
        bucket, key = self.spec_uri.removeprefix("s3://").split("/", 1)
        result_path = self.state / "s3" / bucket / key.replace("spec.json", f"{command}.json")
        assert result_path.exists(), f"{command} wrote no result:\n{completed.stdout}\n{completed.stderr[-4000:]}"
        document: dict[str, Any] = json.loads(result_path.read_text())
        document["_stderr"] = completed.stderr
        document["_rc"] = completed.returncode
        return document

    def python(self, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        """``python <args>`` of .venv-nova in this sandbox's work folder: a process of its own, forked from the
        module's interpreter."""
        assert self.server is not None
        return self.server.run(Run(args, env=env, cwd=str(self.root / "work"), timeout=600))

    def calls(self) -> list[dict[str, Any]]:
        path = self.state / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def cli(self) -> list[list[str]]:
        path = self.state / "hyperpod.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def http(self) -> list[dict[str, Any]]:
        path = self.state / "http.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def set_job(self, name: str, *conditions: str) -> None:
        path = self.state / "hyperpod.json"
        state = json.loads(path.read_text())
        state["jobs"][name]["conditions"] = [{"type": c} for c in conditions]
        path.write_text(json.dumps(state))

    def clear_records(self) -> None:
        for name in ("calls.jsonl", "hyperpod.jsonl", "http.jsonl"):
            (self.state / name).unlink(missing_ok=True)


def _world(nova_app_model: AppModel) -> tuple[dict[str, Any], dict[str, Any]]:
    environment = nova_app_model.function_environment("mtrl-pipeline/Functions/Backend")
    settings = json.loads(environment["MTRL_BACKEND_SETTINGS"])["hyperpod"]
    world = {
        "account": "111122223333",
        "caller_role_name": nova_app_model.physical_name(RUNNER_ROLE),
        "rft_role_name": settings["nova_rft_role_name"],
        "data_bucket": environment["MTRL_DATA_BUCKET"],
        "ecs_cluster_arn": settings["ecs_cluster_arn"],
        "hyperpod_cluster_name": settings["hyperpod_cluster_name"],
        "hyperpod_cluster_arn": nova_app_model.sagemaker_cluster_arn(settings["hyperpod_cluster_name"]),
        "eks_cluster_arn": nova_app_model.arn_of("mtrl-cluster/Eks/Cluster"),
        "gpu_group": settings["hyperpod_gpu_instance_group"],
        "instance_type": INSTANCE_TYPE,
        "instance_count": 2,
    }
    # What a run adds at start (mtrl.runs: the manifest's instance count, environment, the run id).
    run_settings = {**settings, "instance_count": 2, "environment": "wordle", "run_id": RUN_ID}
    return world, run_settings


FORGE_RECIPE = """\
# Stand-in for the starter kit's multi-turn recipe (subscription-gated): the keys the SDK reads and overrides.
run:
  name: mtrl-rft
  model_type: amazon.nova-2-lite-v1:0:256k
  model_name_or_path: nova-lite-2/prod
  replicas: 2
  data_s3_path: ""
  output_s3_path: ""
  rollout_request_arn: ""
  rollout_response_sqs_url: ""
  rollout_request_queue_url: ""
  generate_request_sqs_url: ""
  generate_response_sqs_url: ""
training_config:
  max_steps: 10
"""

PAYLOAD_TEMPLATE = """\
---
# Source: sagemaker-hyperpod-recipes/templates/training-config.yaml
apiVersion: v1
kind: ConfigMap
data:
  config.yaml: |-
    run:
      name: rft
---
spec:
  containers:
    - name: pytorch
      image: 708977205387.dkr.ecr.us-east-1.amazonaws.com/nova-fine-tune-repo:SM-HP-RFT-V2-latest
"""


@pytest.fixture(scope="module")
def nova_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    """One .venv-nova interpreter for the module, started as a sandbox's runner starts (fake AWS on, its own empty
    account); every command forks it and brings its own sandbox's environment."""
    parent = Sandbox(tmp_path_factory.mktemp("nova-parent"), {}, {})
    for name in ("state", "home", "work"):
        (parent.root / name).mkdir()
    with ForkServer(NOVA_PYTHON, preload=NOVA_SDK_PRELOAD, env=parent.environ(), cwd=parent.root / "work") as server:
        yield server


@pytest.fixture
def sandbox(tmp_path: Path, nova_app_model: AppModel, nova_server: ForkServer) -> Iterator[Sandbox]:
    world, settings = _world(nova_app_model)
    box = Sandbox(tmp_path, world, settings, nova_server)
    for name in ("state", "home", "work"):
        (tmp_path / name).mkdir()
    (box.state / "world.json").write_text(json.dumps(world))
    # The installed HyperPod CLI package's recipe folder (RecipeBuilder writes recipes inside it).
    recipes = tmp_path / "site/hyperpod_cli/sagemaker_hyperpod_recipes/recipes_collection/recipes"
    recipes.mkdir(parents=True)
    (tmp_path / "site/hyperpod_cli/__init__.py").write_text('"""Stand-in for the HyperPod CLI package."""\n')
    box.put(STARTER_KIT_BUCKET, "v1/HEAD", "ref: refs/heads/master\n")
    box.put(FORGE_RECIPES_BUCKET, FORGE_RECIPE_KEY, FORGE_RECIPE)
    box.put(JUMPSTART_BUCKET, "recipes/nova_lite_v2_hp_lora_rft_payload.yaml", PAYLOAD_TEMPLATE)
    box.put(JUMPSTART_BUCKET, "recipes/nova_lite_v2_hp_lora_rft_override.json", "{}")
    box.put(world["data_bucket"], "training-data/wordle.jsonl", '{"prompt": "guess"}\n')
    (box.state / "hub_content_document.json").write_text(
        json.dumps(
            {
                "RecipeCollection": [
                    {
                        "Name": "nova_lite_v2_hp_p5_gpu_lora_rft",
                        "CustomizationTechnique": "RLVR",
                        "Peft": "LORA",
                        "InstanceCount": 2,
                        "SupportedInstanceTypes": ["ml.p5.48xlarge"],
                        "HpEksPayloadTemplateS3Uri": f"s3://{JUMPSTART_BUCKET}/recipes/nova_lite_v2_hp_lora_rft_payload.yaml",
                        "HpEksOverrideParamsS3Uri": f"s3://{JUMPSTART_BUCKET}/recipes/nova_lite_v2_hp_lora_rft_override.json",
                    }
                ]
            }
        )
    )
    box.write_spec()
    yield box
    shutil.rmtree(tmp_path / "work", ignore_errors=True)


def _ops(calls: list[dict[str, Any]]) -> list[str]:
    return [f"{c['service']}.{c['operation']}" for c in calls]


def test_setup_submit_status_cancel_teardown_with_the_real_sdk(sandbox: Sandbox, nova_app_model: AppModel) -> None:
    base = sdk_stack_name(parse_settings(sandbox.settings), RUN_ID)
    stack = f"{base}-NovaForgeSDK"
    all_calls: list[dict[str, Any]] = []

    setup = sandbox.run("setup")
    assert setup["ok"], setup
    assert setup["result"]["proxy_function_url"].startswith("https://")
    calls = sandbox.calls()
    all_calls += calls
    assert "ecs.RunTask" in _ops(calls)  # the SDK's SAM deploy task on the reward cluster
    run_task = next(c for c in calls if c["operation"] == "RunTask")
    assert run_task["params"]["cluster"] == sandbox.world["ecs_cluster_arn"]
    assert {"lambda.UpdateFunctionUrlConfig"} <= set(_ops(calls))
    assert not any(c["service"] == "iam" and c["operation"] in {"CreatePolicy", "AttachRolePolicy"} for c in calls)
    assert sandbox.http() == []  # telemetry is off by default (TELEMETRY_OPT_OUT)

    sandbox.clear_records()
    submit = sandbox.run("submit")
    assert submit["ok"], submit.get("error", submit)
    calls = sandbox.calls()
    all_calls += calls
    assert "iam.SimulatePrincipalPolicy" not in _ops(calls)  # IAM pre-validation off (ValidationConfig(iam=False))
    cli = sandbox.cli()
    assert cli[0][:3] == ["connect-cluster", "--cluster-name", sandbox.world["hyperpod_cluster_name"]]
    (start,) = [argv for argv in cli if argv[0] == "start-job"]
    job = submit["result"]["job_name"]
    assert job == Path(start[start.index("--recipe") + 1]).name  # the name start-job printed after NAME:
    assert job.startswith("mtrl-")

    sandbox.clear_records()
    retried = sandbox.run("submit")
    assert retried["ok"]
    assert retried["result"]["job_name"] == job
    assert not [argv for argv in sandbox.cli() if argv[0] == "start-job"]  # idempotent: no second job

    sandbox.clear_records()
    sandbox.set_job(job, "Created", "Running")
    running = sandbox.run("status")
    assert running["result"]["state"] == "Running"
    assert ["get-job", "--job-name", job] in sandbox.cli()
    sandbox.set_job(job, "Created", "Running", "Succeeded")
    done = sandbox.run("status")
    assert done["result"]["state"] == "Succeeded"
    all_calls += sandbox.calls()

    sandbox.clear_records()
    cancelled = sandbox.run("cancel")
    assert cancelled["ok"], cancelled
    assert ["cancel-job", "--job-name", job, "--namespace", sandbox.settings.get("hyperpod_namespace", "kubeflow")] in (
        sandbox.cli()
    )
    all_calls += sandbox.calls()

    sandbox.clear_records()
    teardown = sandbox.run("teardown")  # a fresh process: setup() never ran in it
    assert teardown["ok"], teardown
    calls = sandbox.calls()
    all_calls += calls
    assert {"service": "cloudformation", "operation": "DeleteStack", "params": {"StackName": stack}} in [
        {k: c[k] for k in ("service", "operation", "params")} for c in calls
    ]
    assert fnmatch.fnmatchcase(stack, run_name_pattern("mtrl"))

    (sandbox.state / "recorded-calls.jsonl").write_text("".join(json.dumps(c) + "\n" for c in all_calls))
    assert_calls_allowed([AwsCall.from_record(c) for c in all_calls], RUNNER_ROLE, model=nova_app_model)
    _record_sdk_version(sandbox)


def _record_sdk_version(sandbox: Sandbox) -> None:
    """The flow passed against this SDK: record its version (tests/unit/backends/hyperpod/test_nova_runner.py
    compares it with the pin, so a pin change without a contract run fails there, and a contract run shows up in the
    diff), as .venv-nova reports it (a fork of the module's interpreter)."""
    completed = sandbox.python(
        "-c", "import importlib.metadata as m; print(m.version('amzn-nova-forge'))", env=sandbox.environ()
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    version = completed.stdout.strip()
    path = NOVA_DIR / "sdk_version.json"
    if json.loads(path.read_text()).get("amzn-nova-forge") != version:
        path.write_text(json.dumps({"amzn-nova-forge": version}) + "\n")


def _edit_spec(sandbox: Sandbox, **changes: Any) -> None:
    bucket, key = sandbox.spec_uri.removeprefix("s3://").split("/", 1)
    spec = sandbox.s3_json(bucket, key)
    sandbox.put(bucket, key, json.dumps({**spec, **changes}))


def test_the_old_stack_name_scheme_is_refused_by_the_sdk(sandbox: Sandbox) -> None:
    # Defect 1 (issue 10): <prefix>-run-<run id> is what the adapter used to send; the SDK refuses it before any
    # AWS call that creates something. The current name (the other test) passes.
    _edit_spec(sandbox, stack_name=f"mtrl-run-{RUN_ID}")
    document = sandbox.run("setup")
    assert not document["ok"]
    assert "too long" in document["error"]
    assert "ecs.RunTask" not in _ops(sandbox.calls())


def test_telemetry_is_sent_only_when_the_deployment_opts_in(sandbox: Sandbox) -> None:
    # Defect 9: the SDK's telemetry_logging sends an anonymous GET to nfsdk-t-<region> unless TELEMETRY_OPT_OUT=true.
    sandbox.write_spec(nova_forge_telemetry=True)
    assert sandbox.run("setup")["ok"]
    assert any("nfsdk-t-us-east-1" in request["url"] for request in sandbox.http())


# Runs in .venv-nova under the fake AWS: the runner's own _infrastructure(spec), then what the real SDK made of it.
ENVIRONMENT_PROBE = """
import json, sys
import boto3
from mtrl.backends.hyperpod import nova_runner
bucket, key = sys.argv[1].removeprefix("s3://").split("/", 1)
spec = json.loads(boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
infra = nova_runner._infrastructure(spec)
env = infra.infra.custom_env  # what RFTMultiturnInfrastructure hands its ECS platform
print(json.dumps({
    "class": f"{type(env).__module__}.{type(env).__qualname__}",
    "env_id": env.env_id,
    "s3_uri": env.s3_uri,
    "env_type": env.env_type,
    "is_custom_env": infra.is_custom_env,
    "task_role_arn": infra.infra.get_or_create_ecs_roles()["task_role_arn"],
    "setup_commands": infra.infra._build_setup_commands(infra.env_id),
}))
"""


@pytest.mark.parametrize("env_id", ["wordle", "ask_to_code"])
def test_the_runner_hands_the_sdk_the_runs_own_environment_package(
    sandbox: Sandbox, nova_app_model: AppModel, env_id: str
) -> None:
    # Defect 7: the spec carries the package the stack deployed for the run's environment (wordle included: mtrl's
    # own, not the starter kit's VFEnvId.WORDLE), and the real SDK builds CustomEnvironment(env_id, s3_uri=…) with it.
    sandbox.write_spec(environment=env_id)
    bucket = sandbox.world["data_bucket"]
    uri = f"s3://{bucket}/{build_package(env_id).key}"
    assert parse_settings({**sandbox.settings, "environment": env_id}).package_uri(RUN_ID) == uri
    probe = sandbox.python("-W", "ignore", "-c", ENVIRONMENT_PROBE, sandbox.spec_uri, env=sandbox.environ())
    assert probe.returncode == 0, probe.stderr[-4000:]
    seen = json.loads(probe.stdout.strip().splitlines()[-1])
    assert seen["class"] == "amzn_nova_forge.rft_multiturn.custom_environment.custom_environment.CustomEnvironment"
    assert (seen["env_id"], seen["s3_uri"], seen["env_type"], seen["is_custom_env"]) == (
        env_id,
        uri,
        "multi_turn",
        True,
    )
    # The SDK's environment task (task role = the RFT role) downloads exactly this object and installs it.
    assert seen["task_role_arn"] == nova_app_model.arn_of(RFT_ROLE)
    assert f"aws s3 cp {uri} /tmp/{env_id}.tar.gz" in seen["setup_commands"]
    assert not any("amzn-agi-verifiers" in command and "environments/" in command for command in seen["setup_commands"])
    # …which the RFT role may do (s3:GetObject on nova-envs/*, kms:Decrypt via S3 of the data key).
    key = uri.removeprefix(f"s3://{bucket}/")
    assert_calls_allowed(
        [AwsCall("s3", "GetObject", {"Bucket": bucket, "Key": key}, "us-east-1")], RFT_ROLE, model=nova_app_model
    )

    # The runner's submit goes through with the CustomEnvironment and never reads the package itself (only the
    # SDK's environment tasks do), so the runner role needs no access to nova-envs/.
    sandbox.clear_records()
    submitted = sandbox.run("submit")
    assert submitted["ok"], submitted.get("error", submitted)
    calls = sandbox.calls()
    assert not [c for c in calls if c["service"] == "s3" and "nova-envs/" in str(c["params"].get("Key", ""))]
    assert_calls_allowed([AwsCall.from_record(c) for c in calls], RUNNER_ROLE, model=nova_app_model)


def test_a_spec_without_a_package_is_refused_by_the_runner(sandbox: Sandbox) -> None:
    _edit_spec(sandbox, custom_env_s3_uri=None)
    document = sandbox.run("setup")
    assert not document["ok"]
    assert f"run {RUN_ID}: environment 'wordle' has no Nova Forge package" in document["error"]
    assert "ecs.RunTask" not in _ops(sandbox.calls())
