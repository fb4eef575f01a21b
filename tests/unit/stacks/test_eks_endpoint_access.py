"""Issue 36 item 5: the EKS API endpoint is private only by default, because every function that calls the Kubernetes
API runs in the VPC and reaches the private endpoint.

Sources: Amazon EKS User Guide, "Deploy private clusters with limited internet access" (public endpoint access is
optional; nodes register through the private endpoint) and "Cluster API server endpoint" (with private access on,
the endpoint's name resolves to the control plane's network interfaces inside the VPC, which carry the cluster's
security groups); AWS Lambda Developer Guide, "Giving Lambda functions access to resources in an Amazon VPC" (the
execution role's network-interface permissions; a function in a private subnet reaches the internet through a NAT
gateway).
"""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from stacks.app_builder import Deployment
from stacks.constructs.kubernetes_access import NETWORK_INTERFACE_ACTIONS
from tests.conftest import make_app
from tests.unit.stacks.template_tools import as_list, least_privilege_violations, only


def _resources(stack: cdk.Stack) -> dict[str, Any]:
    return dict(Template.from_stack(stack).to_json()["Resources"])


def _lid(stack: cdk.Stack, construct: Any) -> str:
    return stack.get_logical_id(construct.node.default_child)


def _actions(policy: dict[str, Any]) -> set[str]:
    return {
        action
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        for action in as_list(statement["Action"])
    }


def _kubernetes_clients(deployment: Deployment) -> list[tuple[cdk.Stack, Any, str]]:
    """(stack, function, role logical id) of each function whose code reaches mtrl.kube or kubectl/helm: the
    deploy-time Helm installer and the pipeline's backend function (the verl adapter). The reaper does not: it runs
    teardown by invoking the backend function (mtrl/runs/phases/reaper.py)."""
    assert deployment.cluster is not None
    assert deployment.cluster.helm is not None
    helm = deployment.cluster.helm.function
    backend = deployment.pipeline.backend
    return [
        (deployment.cluster, helm, _lid(deployment.cluster, helm.role)),
        (deployment.pipeline, backend.function, _lid(deployment.pipeline, backend.role)),
    ]


@pytest.fixture(scope="module")
def control_plane(cluster_json: dict[str, Any]) -> dict[str, Any]:
    _, eks = only(cluster_json, "AWS::EKS::Cluster")
    return dict(eks["Properties"]["ResourcesVpcConfig"])


def test_the_default_cluster_has_no_public_endpoint(control_plane: dict[str, Any]) -> None:
    assert control_plane["EndpointPublicAccess"] is False
    assert control_plane["EndpointPrivateAccess"] is True
    assert "PublicAccessCidrs" not in control_plane


def test_kubernetes_clients_run_in_the_private_subnets_with_a_group_the_control_plane_admits_on_443(
    deployment: Deployment, control_plane: dict[str, Any]
) -> None:
    (cluster_group,) = control_plane["SecurityGroupIds"]  # the group the control plane's interfaces carry
    for stack, function, _ in _kubernetes_clients(deployment):
        resources = _resources(stack)
        function_lid = _lid(stack, function)
        config = resources[function_lid]["Properties"]["VpcConfig"]
        # The private subnets the control plane has its interfaces in (the network stack's private subnets).
        assert config["SubnetIds"] == control_plane["SubnetIds"], function_lid
        assert all("PrivateSubnet" in json.dumps(subnet) for subnet in config["SubnetIds"])
        (own_group,) = config["SecurityGroupIds"]
        group_lid = own_group["Fn::GetAtt"][0]
        group = resources[group_lid]
        assert group["Type"] == "AWS::EC2::SecurityGroup"
        # A group of its own: nothing in, HTTPS out only (EKS API, AWS APIs and downloads through the NAT gateway).
        assert "SecurityGroupIngress" not in group["Properties"]
        assert [
            (rule["IpProtocol"], rule["FromPort"], rule["ToPort"], rule["CidrIp"])
            for rule in group["Properties"]["SecurityGroupEgress"]
        ] == [("tcp", 443, 443, "0.0.0.0/0")]
        admitted = [
            lid
            for lid, resource in resources.items()
            if resource["Type"] == "AWS::EC2::SecurityGroupIngress"
            and resource["Properties"]["GroupId"] == cluster_group
            and resource["Properties"]["SourceSecurityGroupId"] == own_group
            and (resource["Properties"]["IpProtocol"], resource["Properties"]["FromPort"]) == ("tcp", 443)
            and resource["Properties"]["ToPort"] == 443
        ]
        assert len(admitted) == 1, function_lid
        # Created before the function runs, removed only after it (the Helm release's Delete still calls the API).
        assert admitted[0] in resources[function_lid]["DependsOn"]


def test_kubernetes_clients_roles_may_manage_the_functions_network_interfaces(deployment: Deployment) -> None:
    for stack, function, role_lid in _kubernetes_clients(deployment):
        resources = _resources(stack)
        function_lid = _lid(stack, function)
        granting = [
            lid
            for lid, resource in resources.items()
            if resource["Type"] == "AWS::IAM::Policy"
            and {"Ref": role_lid} in resource["Properties"]["Roles"]
            and set(NETWORK_INTERFACE_ACTIONS) <= _actions(resource)
        ]
        assert len(granting) == 1, function_lid
        # Lambda checks the permissions when it creates the function: the policy comes first.
        assert granting[0] in resources[function_lid]["DependsOn"]
        role = resources[role_lid]["Properties"]
        assert "ManagedPolicyArns" not in role  # no AWSLambdaVPCAccessExecutionRole (its logs:* on every group)
        # Resource "*" only for the describe actions, which support nothing narrower.
        assert least_privilege_violations({"Resources": {granting[0]: resources[granting[0]]}}) == []


def test_only_the_kubernetes_clients_are_placed_in_the_vpc(deployment: Deployment) -> None:
    """The other functions make no Kubernetes calls and stay outside the VPC (off the NAT gateway's data charges)."""
    stacks = [s for s in (deployment.data, deployment.network, deployment.cluster, deployment.reward_workers,
                          deployment.backends, deployment.pipeline) if s is not None]  # fmt: skip
    placed = {
        (stack.stack_name, lid)
        for stack in stacks
        for lid, resource in _resources(stack).items()
        if resource["Type"] == "AWS::Lambda::Function" and "VpcConfig" in resource["Properties"]
    }
    assert placed == {
        (stack.stack_name, _lid(stack, function)) for stack, function, _ in _kubernetes_clients(deployment)
    }


def test_the_s3_gateway_endpoint_has_no_policy_that_could_block_cloudformation_responses(
    network_template: Template,
) -> None:
    """The Helm installer answers CloudFormation on a presigned S3 URL, from a private subnet: through the gateway
    endpoint, whose default (absent) policy allows it."""
    endpoints = network_template.find_resources("AWS::EC2::VPCEndpoint", {"Properties": {"VpcEndpointType": "Gateway"}})
    assert endpoints
    assert all("PolicyDocument" not in endpoint["Properties"] for endpoint in endpoints.values())


@pytest.fixture(scope="module")
def serverless() -> Deployment:
    app, deployment = make_app({"deployment_profile": "serverless"})
    app.synth()  # with cdk-nag
    return deployment


def test_the_serverless_profile_places_no_function_in_its_isolated_subnets(serverless: Deployment) -> None:
    # No cluster and no NAT gateway (deploy.py SERVERLESS_PROFILE): a function in the isolated private subnets would
    # reach no AWS API, so nothing moves there and no group admits anything.
    assert serverless.cluster is None
    for stack in (serverless.pipeline, serverless.backends):
        assert stack is not None
        resources = _resources(stack)
        assert not [
            lid
            for lid, r in resources.items()
            if r["Type"] == "AWS::Lambda::Function" and "VpcConfig" in r["Properties"]
        ]
        assert not [lid for lid, r in resources.items() if r["Type"] == "AWS::EC2::SecurityGroupIngress"]
