"""The backends as deployed: the backend function's permissions match the adapters' AWS calls, the deploy-time
settings the adapters need reach them, and the backends stack (agent, runner task, EKS access, MLflow) is wired."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from mtrl.backends.hyperpod import HyperPodSettings
from mtrl.backends.serverless.adapter import ServerlessSettings
from mtrl.backends.verl.config import VerlRunConfig
from mtrl.contracts.registry import backend_names, descriptor_for
from mtrl.envs.registry import list_environments
from mtrl.settings import SettingsError
from stacks.app_builder import Deployment
from tests.unit.backends.aws_calls import SERVERLESS_ADAPTER_ACTIONS
from tests.unit.stacks.template_tools import shipped_backend_values

REPO = Path(__file__).resolve().parents[3]
# Settings each adapter takes from the run itself (manifest / run defaults), not from the deployment.
RUN_LEVEL = {
    "instance_count",
    "environment",
    "worker_count",
    "hyperparameters",
    "environment_args",
    "run_id",
    "run_timeout_minutes",
}
# Every AWS operation the adapters call with the backend function's role (S3 object reads/writes and the data key
# come from the function's own prefix-scoped statements; sts:GetCallerIdentity needs no permission).
ADAPTER_ACTIONS = {
    # verl: the EKS API's endpoint and CA (its Kubernetes calls are RBAC, not IAM), and each run's Pod Identity
    # association (the trainer role scoped to the run: mtrl.backends.verl.run_identity)
    "eks:DescribeCluster",
    "eks:CreatePodIdentityAssociation",
    "eks:ListPodIdentityAssociations",
    "eks:DeletePodIdentityAssociation",
    # verl Preflight: the deployment's catalog (mtrl image build / mtrl model import), the registered copy's
    # SHA256SUMS and the built image (issue 36 item 2)
    "ssm:GetParameter",
    "ssm:GetParametersByPath",
    "s3:GetObject",
    "ecr:DescribeImages",
    # sessions: cleanup releases a training session a killed loop task left behind (the task drives them)
    "sagemaker:DescribeTrainingSession",
    "sagemaker:StopTrainingSession",
    "sagemaker:DeleteTrainingSession",
    # hyperpod.py: GpuCapacity
    "sagemaker:DescribeCluster",
    "sagemaker:UpdateCluster",
    "sagemaker:ListClusterNodes",
    "sagemaker:ListClusterEvents",
    # hyperpod.py: runner and reward-worker tasks, cleanup
    "ecs:RunTask",
    "ecs:TagResource",
    "ecs:ListTasks",
    "ecs:DescribeTasks",
    "ecs:StopTask",
    "ecs:DescribeTaskDefinition",
    "ecs:ListTaskDefinitions",
    "ecs:DeregisterTaskDefinition",
    "cloudformation:DescribeStacks",
    "cloudformation:DescribeStackEvents",
    "cloudformation:DeleteStack",
    # serverless.py
    "sagemaker:CreateJob",
    "sagemaker:DescribeJob",
    "sagemaker:StopJob",
    "sagemaker:AddTags",
    "sagemaker:DescribeMlflowApp",
    "sagemaker:DescribeModelPackageGroup",
    "iam:GetRole",
    "s3:GetBucketLocation",
    "lambda:InvokeFunction",
    "bedrock-agentcore:InvokeAgentRuntime",
    "logs:FilterLogEvents",
    # hyperpod worker_role.py: each run's own reward-worker role
    "iam:CreateRole",
    "iam:PutRolePolicy",
    "iam:AttachRolePolicy",
    "iam:DeleteRolePolicy",
    "iam:DetachRolePolicy",
    "iam:DeleteRole",
    # both: roles handed to the services
    "iam:PassRole",
}
# What DeleteStack of the per-run Nova Forge stack needs (CloudFormation deletes with the caller's permissions).
STACK_DELETE_ACTIONS = {
    "sqs:DeleteQueue",
    "sqs:GetQueueAttributes",
    "lambda:DeleteFunction",
    "lambda:GetFunction",
    "lambda:RemovePermission",
    "lambda:DeleteFunctionUrlConfig",
    "lambda:DeleteEventSourceMapping",
    "lambda:GetEventSourceMapping",
    "dynamodb:DeleteTable",
    "dynamodb:DescribeTable",
    "logs:DeleteLogGroup",
}
NO_RESOURCE_LEVEL = {
    "ecs:ListTasks",
    "ecs:DescribeTaskDefinition",
    "ecs:ListTaskDefinitions",
    "ecs:DeregisterTaskDefinition",
}
PER_RUN_WILDCARD = re.compile(
    r"mtrl-nf\*|task/mtrl-reward-workers/\*|job/\*/mtrl-\*|:\*\"|mapping:\*|:runtime/[^*/]+/runtime-endpoint/\*|"
    r"/aws/bedrock-agentcore/runtimes/[^*]+-\*|training-session/mtrl-\*|podidentityassociation/mtrl-eks/\*|"
    # the verl catalog's model parameters and the SHA256SUMS of the copies they name (one per model id)
    r"parameter/mtrl/models/\*|/models/\*/SHA256SUMS"
)
# Granted only when the deployment lists AgentCore runtimes (its own, or run_allowed_agent_runtime_arns).
AGENTCORE_SMOKE_ACTIONS = {"bedrock-agentcore:InvokeAgentRuntime", "logs:FilterLogEvents"}
LISTED_RUNTIME = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/wordle_agent-AbCdEf1234"


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


# Every backend's stack side at its fullest: the default deployment plus Nova Forge (the hyperpod backend's runner
# exists only when a restricted instance group is configured).
@pytest.fixture(scope="module")
def pipeline_template(nova_forge_synth: tuple[Deployment, Any]) -> Template:
    return Template.from_stack(nova_forge_synth[0].pipeline)


@pytest.fixture(scope="module")
def backends_template(nova_forge_synth: tuple[Deployment, Any]) -> Template:
    backends = nova_forge_synth[0].backends
    assert backends is not None
    return Template.from_stack(backends)


# Every registered backend with a stack side (hyperpod, serverless, verl, sessions): each ships values and a policy.
STACK_SIDES = {name for name in backend_names() if descriptor_for(name).stack_side}


@pytest.fixture(scope="module")
def backend_statements(pipeline_template: Template) -> list[dict[str, Any]]:
    """Every backend's statements on the backend function (one inline policy per backend's stack side)."""
    policies = [
        p
        for name, p in pipeline_template.find_resources("AWS::IAM::Policy").items()
        if name.startswith("BackendPermissions")
    ]
    assert len(policies) == len(STACK_SIDES)  # one per backend with a stack side
    return [s for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]]


@pytest.fixture(scope="module")
def shipped(pipeline_template: Template) -> dict[str, dict[str, Any]]:
    return shipped_backend_values(pipeline_template.to_json())


def test_backend_function_gets_exactly_the_adapters_actions(backend_statements: list[dict[str, Any]]) -> None:
    granted = {action for s in backend_statements for action in _as_list(s["Action"])}
    assert granted == (ADAPTER_ACTIONS - AGENTCORE_SMOKE_ACTIONS) | STACK_DELETE_ACTIONS  # no runtime listed
    assert not any("*" in action for action in granted)


def test_backend_function_wildcards_and_conditions(backend_statements: list[dict[str, Any]]) -> None:
    for statement in backend_statements:
        actions = set(_as_list(statement["Action"]))
        resources = [json.dumps(r) for r in _as_list(statement["Resource"])]
        if "iam:PassRole" in actions:
            services = set(_as_list(statement["Condition"]["StringEquals"]["iam:PassedToService"]))
            assert services in (
                {"ecs-tasks.amazonaws.com"},
                {"pods.eks.amazonaws.com"},  # verl: each run's association passes the trainer role
                {"sagemaker.amazonaws.com"},
                {"sagemaker.amazonaws.com", "job.sagemaker.amazonaws.com"},
            ), services
            # Exact roles, or each run's own worker role (<stem>-nf*-worker).
            assert all("*" not in r or r.endswith(':role/mtrl-nf*-worker"') for r in resources), resources
        if statement["Resource"] == "*":
            assert actions <= NO_RESOURCE_LEVEL, actions
        if actions & {"ecs:RunTask", "ecs:ListTasks", "ecs:DescribeTasks", "ecs:StopTask"}:
            assert "cluster/mtrl-reward-workers" in json.dumps(statement["Condition"])
        for resource in resources:
            if "*" in resource and statement["Resource"] != "*":
                # Only per-run names, generated ids or a family's revisions.
                assert PER_RUN_WILDCARD.search(resource), resource
    # Issue 20 item 6: the backend creates each run's worker role only under the deploy-time boundary, with only the
    # base policy attached (IAM User Guide, "Permissions boundaries for IAM entities": delegated role creation holds
    # the iam:PermissionsBoundary condition); it can neither drop the boundary nor attach anything else.
    writes = {
        a for s in backend_statements for a in _as_list(s["Action"]) if a.startswith("iam:") and a != "iam:GetRole"
    }
    (trainer,) = [s for s in backend_statements if s["Sid"] == "VerlPassTrainerRole"]
    assert json.dumps(trainer["Resource"]).endswith(':role/mtrl-verl-trainer"]]}')
    assert writes == {
        "iam:CreateRole",
        "iam:PutRolePolicy",
        "iam:AttachRolePolicy",
        "iam:DeleteRolePolicy",
        "iam:DetachRolePolicy",
        "iam:DeleteRole",
        "iam:PassRole",
    }
    assert not writes & {
        "iam:PutRolePermissionsBoundary",
        "iam:DeleteRolePermissionsBoundary",
        "iam:UpdateAssumeRolePolicy",
    }
    by_sid = {s["Sid"]: s for s in backend_statements}
    for sid in ("CreateRunWorkerRoleUnderTheBoundary", "AttachTheWorkerBasePolicy"):
        boundary = by_sid[sid]["Condition"]["StringEquals"]["iam:PermissionsBoundary"]
        assert "RunWorkerBoundary" in json.dumps(boundary), boundary
        assert json.dumps(by_sid[sid]["Resource"]).endswith(':role/mtrl-nf*-worker"')
    assert "WorkerBasePolicy" in json.dumps(by_sid["AttachTheWorkerBasePolicy"]["Condition"]["ArnEquals"])
    # The same scaling in the hyperpod and verl policies (each backend states what it calls), never a wildcard.
    scaling = [s for s in backend_statements if s["Sid"] == "HyperPodScaleTrainingGroup"]
    assert len(scaling) == 2
    for scale in scaling:
        assert "Fn::ImportValue" in json.dumps(scale["Resource"])  # the deployed cluster's ARN, not a wildcard
    (mapping,) = [s for s in backend_statements if s["Sid"] == "DeletePerRunEventSourceMappings"]
    assert "mtrl-nf*" in json.dumps(mapping["Condition"]["ArnLike"]["lambda:FunctionArn"])


def test_every_deploy_time_setting_the_adapters_require_is_passed(shipped: dict[str, dict[str, Any]]) -> None:
    """Each backend's section holds what its own model requires (and only fields of that model)."""
    assert set(shipped) == STACK_SIDES  # local needs nothing deployed
    for backend, model in (("hyperpod", HyperPodSettings), ("serverless", ServerlessSettings), ("verl", VerlRunConfig)):
        required = {name for name, f in model.model_fields.items() if f.is_required()} - RUN_LEVEL
        assert required <= set(shipped[backend]), f"{model.__name__}: {required - set(shipped[backend])}"
        assert set(shipped[backend]) <= set(model.model_fields), backend
    assert {"serverless_agent_lambda_arns"} <= set(shipped["serverless"])
    assert {"reward_container_name", "nova_runner_container_name"} <= set(shipped["hyperpod"])
    assert isinstance(shipped["hyperpod"]["task_subnet_ids"], list)  # a list, as the adapter's model wants


def test_values_are_shipped_typed_and_read_back_by_each_adapters_model(shipped: dict[str, dict[str, Any]]) -> None:
    """Numbers and booleans travel as JSON numbers and booleans, never as "true" or "2"; each section, merged with a
    run's settings, validates with its adapter's own model."""
    hyperpod, serverless, verl = shipped["hyperpod"], shipped["serverless"], shipped["verl"]
    assert hyperpod["hyperpod_idle_instance_count"] == 0
    assert isinstance(hyperpod["hyperpod_max_instance_count"], int)
    assert hyperpod["nova_forge_telemetry"] is False
    assert serverless["serverless_accept_eula"] is False
    assert verl["verl_hub_downloads"] is False
    assert isinstance(verl["verl_max_steps"], int)
    assert isinstance(verl["verl_models"], list)
    assert isinstance(verl["verl_instance_taints"], list)
    run = {"run_id": "r1", "environment": "wordle", "instance_count": 1, "run_timeout_minutes": 60}
    deployed_name = "arn:aws:iam::123456789012:role/deployed"  # what each CDK token resolves to at deploy time
    for backend, model in (("hyperpod", HyperPodSettings), ("serverless", ServerlessSettings), ("verl", VerlRunConfig)):
        section = json.loads(json.dumps(shipped[backend]).replace("<token>", deployed_name))
        model.model_validate({**section, **run})


def test_one_agent_per_enabled_environment_named_for_the_job_roles_invoke_scope(
    backends_template: Template, deployment: Deployment
) -> None:
    assert deployment.backends is not None
    assert sorted(deployment.backends.agents) == sorted(
        env_id for env_id, source in list_environments() if source == "builtin"
    )
    for env_id in ("wordle", "ask_to_code"):
        backends_template.has_resource_properties(
            "AWS::Lambda::Function",
            {
                "FunctionName": f"mtrl-agent-{env_id}",
                "Handler": "handler.handler",
                "Environment": {"Variables": Match.object_like({"MTRL_ENV_ID": env_id})},
                "Role": {"Fn::GetAtt": [Match.string_like_regexp("^RolesAgentRole"), "Arn"]},
            },
        )
    statements = [
        s
        for p in backends_template.find_resources("AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s.get("Sid") == "InvokeTheRunAgent"
    ]
    assert len(statements) == 1
    assert ":function:mtrl-agent-*" in json.dumps(statements[0]["Resource"])


def test_agents_run_with_the_dependency_layer_that_pins_the_sdk(backends_template: Template) -> None:
    """Defect 2: without the layer the runtime's boto3 may not know sagemakerjobruntime."""
    layers = backends_template.find_resources("AWS::Lambda::LayerVersion")
    (layer_id,) = [name for name in layers if name.startswith("MtrlPythonDependencies")]
    agents = [
        f
        for f in backends_template.find_resources("AWS::Lambda::Function").values()
        if str(f["Properties"].get("FunctionName", "")).startswith("mtrl-agent-")
    ]
    assert len(agents) >= 2
    for agent in agents:
        assert agent["Properties"]["Layers"] == [{"Ref": layer_id}]
        assert agent["Properties"]["Runtime"] == "python3.14"


def test_the_settings_list_each_environments_agent(shipped: dict[str, dict[str, Any]]) -> None:
    agents = {entry.partition("=")[0] for entry in shipped["serverless"]["serverless_agent_lambda_arns"]}
    assert {"wordle", "ask_to_code"} <= agents


def test_backend_function_grants_every_recorded_serverless_adapter_call(
    backend_statements: list[dict[str, Any]],
) -> None:
    granted = {action for s in backend_statements for action in _as_list(s["Action"])}
    # S3 objects and the episode metrics are the function's own statements (pipeline_functions.py), not this policy's.
    own = {"s3:GetObject", "s3:PutObject", "cloudwatch:GetMetricData"}
    not_here = {"sts:GetCallerIdentity", *own} | AGENTCORE_SMOKE_ACTIONS  # no runtime listed
    assert SERVERLESS_ADAPTER_ACTIONS - not_here <= granted


def test_nova_runner_task_runs_with_the_runner_role(backends_template: Template) -> None:
    backends_template.has_resource_properties(
        "AWS::ECS::TaskDefinition",
        {
            "Family": "mtrl-nova-runner",
            "TaskRoleArn": {"Fn::GetAtt": [Match.string_like_regexp("^RolesNovaRunnerRole"), "Arn"]},
            "ContainerDefinitions": [Match.object_like({"Name": "runner"})],
            "RequiresCompatibilities": ["FARGATE"],
        },
    )
    dockerfile = (REPO / "docker" / "nova-runner" / "Dockerfile").read_text()
    # The SDK pin lives in the lock the image installs (backends/hyperpod/test_nova_runner.py checks the rest).
    assert "--requirement requirements/nova-runner.txt" in dockerfile
    assert "python:3.12" in dockerfile


def test_runner_has_eks_access_in_the_job_namespaces_only(backends_template: Template) -> None:
    (entry,) = backends_template.find_resources("AWS::EKS::AccessEntry").values()
    properties = entry["Properties"]
    assert properties["PrincipalArn"]["Fn::GetAtt"][0].startswith("RolesNovaRunnerRole")
    scopes = {
        json.dumps(p["PolicyArn"]).split("/")[-1].strip('"]}'): p["AccessScope"] for p in properties["AccessPolicies"]
    }
    assert scopes == {
        "AmazonEKSEditPolicy": {"Type": "namespace", "Namespaces": ["kubeflow", "mtrl-runs"]},
        "AmazonEKSViewPolicy": {"Type": "cluster"},
    }


def test_serverless_prerequisites_exist(backends_template: Template) -> None:
    backends_template.has_resource_properties(
        "AWS::SageMaker::ModelPackageGroup", {"ModelPackageGroupName": "mtrl-serverless"}
    )
    backends_template.has_resource_properties(
        "AWS::SageMaker::MlflowApp", {"Name": "mtrl-mlflow", "ArtifactStoreUri": Match.any_value()}
    )


def test_backends_roles_have_no_star_actions_and_conditioned_pass_role(backends_template: Template) -> None:
    for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        for policy in backends_template.find_resources(kind).values():
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                actions = _as_list(statement["Action"])
                assert "*" not in actions
                if "iam:PassRole" in actions:
                    assert "iam:PassedToService" in statement["Condition"]["StringEquals"]


def test_custom_environment_is_checked_at_synth(app_factory: Any) -> None:
    with pytest.raises(SettingsError, match=r"custom environment 'nope'.*no environment 'nope'"):
        app_factory({"use_custom_env": True, "custom_env_id": "nope"})
    _app, deployment = app_factory({"use_custom_env": True, "custom_env_id": "template"})
    assert deployment.backends is not None
    assert deployment.backends.agents["template"].function_name == "mtrl-agent-template"


def test_agentcore_is_granted_only_for_the_runtimes_the_operator_listed(app_factory: Any) -> None:
    """Issue 20 item 6: `runtime/*` let a run's job, and the smoke test, invoke any AgentCore runtime of the account;
    now only the listed runtimes (any endpoint of each: a run chooses the qualifier) and their log groups."""
    _, deployment = app_factory({"run_allowed_agent_runtime_arns": json.dumps([LISTED_RUNTIME])})
    (policy,) = [
        p
        for p in Template.from_stack(deployment.pipeline).find_resources("AWS::IAM::Policy").values()
        if "ServerlessAgentCoreSmokeTest" in json.dumps(p)
    ]
    by_sid = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    runtime_resources = [LISTED_RUNTIME, f"{LISTED_RUNTIME}/runtime-endpoint/*"]
    assert by_sid["ServerlessAgentCoreSmokeTest"]["Resource"] == runtime_resources
    assert by_sid["ServerlessAgentCoreSmokeTestLogs"]["Resource"] == (
        "arn:aws:logs:us-east-1:123456789012:log-group:/aws/bedrock-agentcore/runtimes/wordle_agent-AbCdEf1234-*"
    )
    assert deployment.backends is not None
    job_policies = Template.from_stack(deployment.backends).find_resources("AWS::IAM::Policy")
    (job_statement,) = [
        s
        for p in job_policies.values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s.get("Sid") == "InvokeTheRunAgentRuntime"
    ]
    assert job_statement["Resource"] == runtime_resources
    assert ":runtime/*" not in json.dumps(job_policies)


def test_runs_scale_the_restricted_group_when_one_is_configured(app_factory: Any) -> None:
    """Nova Forge trains on the restricted instance group, so that is the group a run scales (up to its run_count)."""
    restricted = {"name": "nova-rig", "instance_type": "ml.p5.48xlarge", "run_count": 2, "idle_count": 0}
    _, deployment = app_factory({"hyperpod_restricted_instance_group": json.dumps(restricted)})
    hyperpod = shipped_backend_values(Template.from_stack(deployment.pipeline).to_json())["hyperpod"]
    assert hyperpod["hyperpod_gpu_instance_group"] == "nova-rig"
    assert hyperpod["hyperpod_max_instance_count"] == 2


def test_verl_pods_reach_aws_only_as_the_trainer_role_through_pod_identity(backends_template: Template) -> None:
    """Issue 21: a verl run's pods read the run's rows and write its outputs; EKS Pod Identity gives their service
    account a role trusted by pods.eks.amazonaws.com for sts:AssumeRole and sts:TagSession (EKS User Guide, "EKS Pod
    Identity" role trust policy). Issue 36 item 5: no standing association (each run gets its own, scoped by a
    session policy, from the adapter), and the data key only through S3 (kms:ViaService)."""
    assert backends_template.find_resources("AWS::EKS::PodIdentityAssociation") == {}
    backends_template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "RoleName": "mtrl-verl-trainer",
            "AssumeRolePolicyDocument": {
                "Statement": [
                    {
                        "Action": ["sts:AssumeRole", "sts:TagSession"],
                        "Effect": "Allow",
                        "Principal": {"Service": "pods.eks.amazonaws.com"},
                    }
                ]
            },
        },
    )
    (policy,) = [
        p
        for p in backends_template.find_resources("AWS::IAM::Policy").values()
        if "VerlTrainer" in json.dumps(p["Properties"]["Roles"])
    ]
    by_sid = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    # no model copy configured by default: the registered ones (mtrl model import) under models/ only
    assert set(by_sid) == {"RunObjects", "RunInputs", "DataKey", "MlflowApp", "RegisteredModelCopies"}
    assert by_sid["RegisteredModelCopies"]["Action"] == "s3:GetObject"
    assert json.dumps(by_sid["RegisteredModelCopies"]["Resource"]).endswith('/models/*"]]}')
    assert json.dumps(by_sid["RunObjects"]["Resource"]).endswith('/runs/*"]]}')
    assert by_sid["DataKey"]["Condition"] == {
        "StringEquals": {"kms:ViaService": {"Fn::Join": ["", ["s3.", {"Ref": "AWS::Region"}, ".amazonaws.com"]]}}
    }
    assert all(s["Resource"] != "*" for s in by_sid.values())
