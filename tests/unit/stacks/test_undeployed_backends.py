"""A backend a deployment cannot run contributes nothing to it (issue 36): no statements on the backend function, no
roles, no access entry, no shipped values; its runs are refused naming the setting to change.

Which backends a deployment can run comes from their descriptors only (``DeploySettings.backend_problem``): hyperpod
(Amazon Nova Forge) trains only on a restricted instance group (``hyperpod_restricted_instance_group``), verl and
hyperpod need the cluster (``deploy_cluster``). Three synths: the default (verl, serverless, sessions), the default
plus Nova Forge (all four) and the serverless profile (serverless, sessions).
"""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from mtrl.backends.hyperpod.adapter import HyperPodAdapter
from mtrl.contracts.backend import RunContext
from mtrl.contracts.registry import backend_names, descriptor_for
from stacks.app_builder import Deployment
from tests.conftest import make_app
from tests.unit.stacks.template_tools import policy_statements, shipped_backend_values

# What the stacks name the hyperpod backend's parts (stacks/backends/roles.py, stacks/backends_stack.py,
# stacks/backends/hyperpod/__init__.py): construct-path prefixes of their logical ids, never a hash suffix.
HYPERPOD_POLICY = "BackendPermissionsHyperPod"
HYPERPOD_ROLES = ("RolesNovaRunnerRole", "RolesRftRole")
HYPERPOD_OUTPUTS = {"NovaRunnerRoleArn", "RftRoleName", "NovaRunnerTaskDefinitionArn"}


@pytest.fixture(scope="module")
def serverless_profile() -> Deployment:
    app, deployment = make_app({"deployment_profile": "serverless"})
    app.synth()  # cdk-nag runs here: an acknowledgment left on a construct that is gone would not fail, a finding would
    return deployment


def _templates(deployment: Deployment) -> tuple[dict[str, Any], dict[str, Any]]:
    assert deployment.backends is not None
    return dict(Template.from_stack(deployment.pipeline).to_json()), dict(
        Template.from_stack(deployment.backends).to_json()
    )


def _backend_policies(pipeline: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Logical id → the inline policies the backends' stack sides put on the backend function's role."""
    return {
        logical_id: resource
        for logical_id, resource in pipeline["Resources"].items()
        if resource["Type"] == "AWS::IAM::Policy" and logical_id.startswith("BackendPermissions")
    }


def _sids(pipeline: dict[str, Any], prefix: str) -> set[str]:
    return {
        statement["Sid"]
        for logical_id, statement in policy_statements(pipeline)
        if logical_id.startswith(prefix) and "Sid" in statement
    }


def policy_statements_of(pipeline: dict[str, Any], prefix: str) -> list[tuple[str, dict[str, Any]]]:
    return [(i, statement) for i, statement in policy_statements(pipeline) if i.startswith(prefix)]


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _hyperpod_parts(backends: dict[str, Any]) -> list[str]:
    """Every resource and output of the backends stack that belongs to the hyperpod backend only."""
    found = [
        logical_id
        for logical_id, resource in backends["Resources"].items()
        if logical_id.startswith((*HYPERPOD_ROLES, "NovaRunner", "NovaEnvironmentPackages"))
        or resource["Type"] in {"AWS::EKS::AccessEntry", "AWS::ECS::TaskDefinition", "Custom::CDKBucketDeployment"}
        or resource.get("Properties", {}).get("ManagedPolicyName") == "mtrl-rftPolicy"
    ]
    return found + sorted(HYPERPOD_OUTPUTS & set(backends.get("Outputs", {})))


@pytest.fixture(scope="module")
def hyperpod_only_sids(nova_forge_synth: tuple[Deployment, Any]) -> set[str]:
    """The statements (by sid) only the hyperpod backend puts on the backend function's role."""
    pipeline, _ = _templates(nova_forge_synth[0])
    others = {  # every other statement of the pipeline stack: other backends', other functions'
        statement["Sid"]
        for logical_id, statement in policy_statements(pipeline)
        if not logical_id.startswith(HYPERPOD_POLICY) and "Sid" in statement
    }
    only = _sids(pipeline, HYPERPOD_POLICY) - others
    # The runner's and workers' PassRole, per-run worker roles and stacks (scaling a group and the node role's PassRole
    # are verl's and the capacity guard's too: stacks.backends.permissions.cluster_group_statements).
    assert {
        "PassTaskRolesToEcs",
        "CreateRunWorkerRoleUnderTheBoundary",
        "PerRunStacks",
    } <= only
    return only


def test_with_nova_forge_the_hyperpod_backend_has_its_statements_roles_and_values(
    nova_forge_synth: tuple[Deployment, Any],
) -> None:
    pipeline, backends = _templates(nova_forge_synth[0])
    assert [i for i in _backend_policies(pipeline) if i.startswith(HYPERPOD_POLICY)]
    assert set(shipped_backend_values(pipeline)) == {"hyperpod", "serverless", "sessions", "verl"}
    template = Template.from_json(backends)
    template.has_resource_properties("AWS::IAM::Role", {"RoleName": "mtrl-rft"})
    template.has_resource_properties("AWS::IAM::ManagedPolicy", {"ManagedPolicyName": "mtrl-rftPolicy"})
    template.has_resource_properties(
        "AWS::EKS::AccessEntry",
        {"PrincipalArn": {"Fn::GetAtt": [Match.string_like_regexp("^RolesNovaRunnerRole"), "Arn"]}},
    )
    parts = _hyperpod_parts(backends)
    for prefix in (*HYPERPOD_ROLES, "NovaEnvironmentPackages", *HYPERPOD_OUTPUTS):
        assert [p for p in parts if p.startswith(prefix)], prefix


def test_the_default_deployment_deploys_nothing_of_the_hyperpod_backend(
    deployment: Deployment, hyperpod_only_sids: set[str]
) -> None:
    """Without hyperpod_restricted_instance_group no hyperpod run can run (the backend's deploy_check), so the
    backend function's role has none of its statements (cluster scaling, the runner's and the workers' PassRole,
    per-run stacks) and the backends stack none of its roles, runner task, access entry or packages."""
    pipeline, backends = _templates(deployment)
    assert not [i for i in _backend_policies(pipeline) if i.startswith(HYPERPOD_POLICY)]
    assert (
        not {sid for _, statement in policy_statements(pipeline) if (sid := statement.get("Sid"))} & hyperpod_only_sids
    )
    assert set(shipped_backend_values(pipeline)) == {"serverless", "sessions", "verl"}
    Template.from_json(backends).resource_properties_count_is("AWS::IAM::Role", {"RoleName": "mtrl-rft"}, 0)
    assert _hyperpod_parts(backends) == []


def test_verl_states_the_group_scaling_it_calls_in_its_own_policy(deployment: Deployment) -> None:
    """The verl adapter scales the training group (GpuCapacity: DescribeCluster, UpdateCluster re-stating the node
    role, ListClusterNodes, ListClusterEvents); before, only the hyperpod policy granted that, so a default
    deployment without it would refuse verl's scaling (tests/contract/test_iam_contract_verl.py replays the calls)."""
    pipeline, _ = _templates(deployment)
    verl = {statement["Sid"]: statement for _, statement in policy_statements_of(pipeline, "BackendPermissionsVerl")}
    assert set(_as_list(verl["HyperPodScaleTrainingGroup"]["Action"])) == {
        "sagemaker:DescribeCluster",
        "sagemaker:UpdateCluster",
        "sagemaker:ListClusterNodes",
        "sagemaker:ListClusterEvents",
    }
    assert verl["PassNodeRoleOnUpdateCluster"]["Condition"] == {
        "StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}
    }


def test_the_serverless_profile_deploys_only_the_backends_it_can_run(
    serverless_profile: Deployment, hyperpod_only_sids: set[str]
) -> None:
    """No cluster (deploy_cluster=false): neither verl nor hyperpod contributes anything."""
    pipeline, backends = _templates(serverless_profile)
    runnable = {n for n in backend_names() if descriptor_for(n).stack_side and not descriptor_for(n).needs_cluster}
    assert set(shipped_backend_values(pipeline)) == runnable == {"serverless", "sessions"}
    policies = list(_backend_policies(pipeline))
    assert [i for i in policies if i.startswith("BackendPermissionsServerless")]
    assert [i for i in policies if i.startswith("BackendPermissionsSessions")]
    assert not [i for i in policies if i.startswith((HYPERPOD_POLICY, "BackendPermissionsVerl"))]
    assert (
        not {sid for _, statement in policy_statements(pipeline) if (sid := statement.get("Sid"))} & hyperpod_only_sids
    )
    assert not [sid for sid in _sids(pipeline, "BackendPermissions") if sid.startswith("Verl")]
    assert _hyperpod_parts(backends) == []
    assert not [i for i in backends["Resources"] if i.startswith("VerlTrainer")]
    # verl's in-account builders (trainer image, model copies: stacks/constructs/image_builder.py) neither.
    assert not [i for i in backends["Resources"] if i.startswith("ImageBuilder")]
    assert "VerlTrainerRepositoryUri" not in backends.get("Outputs", {})


def test_a_hyperpod_run_in_the_default_deployment_is_refused_at_preflight_naming_the_setting(
    deployment: Deployment,
) -> None:
    """Preflight merges the run's settings over its backend's shipped values (mtrl.runs.phases.inputs); none are
    shipped for hyperpod, and its preflight fails before anything is provisioned, naming what to configure."""
    shipped = shipped_backend_values(_templates(deployment)[0])
    assert "hyperpod" not in shipped
    run = RunContext(
        run_id="r-1",
        settings={**shipped.get("hyperpod", {}), "run_id": "r-1", "backend": "hyperpod"},
        dataset_uri="s3://bucket/runs/r-1/data/dataset.jsonl",
        eval_dataset_uri=None,
        output_uri="s3://bucket/runs/r-1/",
    )
    (finding,) = HyperPodAdapter().preflight(run)
    assert not finding.ok
    assert "not deployed here: set hyperpod_restricted_instance_group" in finding.message
