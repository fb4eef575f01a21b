"""Network stack: VPC layout, endpoints, flow logs, security groups, bring-your-own VPC."""

from __future__ import annotations

import ipaddress
from typing import Any

from aws_cdk.assertions import Match, Template

from stacks.constructs.network import INTERFACE_ENDPOINTS
from tests.conftest import TEST_ZONES, make_app


def _subnets(template: Template, public: bool) -> list[dict[str, Any]]:
    return [
        subnet["Properties"]
        for subnet in template.find_resources("AWS::EC2::Subnet").values()
        if subnet["Properties"]["MapPublicIpOnLaunch"] is public
    ]


def test_vpc_spans_the_configured_zones_with_private_subnets_sized_for_pods(network_template: Template) -> None:
    network_template.has_resource_properties(
        "AWS::EC2::VPC", {"CidrBlock": "10.0.0.0/16", "EnableDnsHostnames": True, "EnableDnsSupport": True}
    )
    private = _subnets(network_template, public=False)
    public = _subnets(network_template, public=True)
    assert sorted(s["AvailabilityZone"] for s in private) == TEST_ZONES
    assert sorted(s["AvailabilityZone"] for s in public) == TEST_ZONES
    assert all(ipaddress.IPv4Network(s["CidrBlock"]).prefixlen == 18 for s in private)
    assert all(ipaddress.IPv4Network(s["CidrBlock"]).prefixlen == 24 for s in public)


def test_single_nat_gateway_by_default(network_template: Template) -> None:
    network_template.resource_count_is("AWS::EC2::NatGateway", 1)


def test_nat_per_az_and_zone_count_follow_settings() -> None:
    _, deployment = make_app(
        {"nat_gateways": "per_az", "availability_zones": ["us-east-1a", "us-east-1b", "us-east-1c"]}
    )
    template = Template.from_stack(deployment.network)
    template.resource_count_is("AWS::EC2::NatGateway", 3)
    template.resource_count_is("AWS::EC2::Subnet", 6)


def test_endpoints_cover_the_workloads(network_template: Template) -> None:
    network_template.has_resource_properties(
        "AWS::EC2::VPCEndpoint",
        {"VpcEndpointType": "Gateway", "ServiceName": {"Fn::Join": ["", Match.array_with([".s3"])]}},
    )
    interface = [
        e["Properties"]
        for e in network_template.find_resources("AWS::EC2::VPCEndpoint").values()
        if e["Properties"].get("VpcEndpointType") == "Interface"
    ]
    assert len(interface) == len(INTERFACE_ENDPOINTS)
    assert all(e["PrivateDnsEnabled"] is True for e in interface)
    names = {str(e["ServiceName"]) for e in interface}
    for suffix in ("ecr.api", "ecr.dkr", "sts", "logs", "sqs", "sagemaker.api", "sagemaker.runtime", "eks", "kms"):
        assert any(name.endswith(f"{suffix}") or f".{suffix}" in name for name in names), suffix


def test_endpoints_can_be_switched_off() -> None:
    _, deployment = make_app({"create_vpc_endpoints": False})
    Template.from_stack(deployment.network).resource_count_is("AWS::EC2::VPCEndpoint", 0)


def test_flow_logs_go_to_an_encrypted_log_group_with_retention(network_template: Template) -> None:
    network_template.has_resource_properties(
        "AWS::Logs::LogGroup",
        {"LogGroupName": "/mtrl/vpc/flow-logs", "RetentionInDays": 90, "KmsKeyId": Match.any_value()},
    )
    network_template.has_resource_properties(
        "AWS::EC2::FlowLog",
        {"ResourceType": "VPC", "TrafficType": "ALL", "LogDestinationType": "cloud-watch-logs"},
    )


def _group_logical_id(template: Template, description_start: str) -> str:
    groups = template.find_resources(
        "AWS::EC2::SecurityGroup", {"Properties": {"GroupDescription": Match.string_like_regexp(description_start)}}
    )
    (logical_id,) = groups
    return logical_id


def test_hyperpod_group_allows_all_traffic_between_its_members(network_template: Template) -> None:
    group = _group_logical_id(network_template, "^HyperPod nodes")
    network_template.has_resource_properties(
        "AWS::EC2::SecurityGroupIngress",
        {
            "IpProtocol": "-1",
            "GroupId": {"Fn::GetAtt": [group, "GroupId"]},
            "SourceSecurityGroupId": {"Fn::GetAtt": [group, "GroupId"]},
        },
    )


def test_reward_workers_accept_no_inbound_traffic(network_template: Template) -> None:
    group_id = _group_logical_id(network_template, "^Reward workers")
    group = network_template.find_resources("AWS::EC2::SecurityGroup")[group_id]
    assert "SecurityGroupIngress" not in group["Properties"]
    ingress_rules = network_template.find_resources("AWS::EC2::SecurityGroupIngress")
    assert not [
        r for r in ingress_rules.values() if r["Properties"]["GroupId"] == {"Fn::GetAtt": [group_id, "GroupId"]}
    ]


def test_endpoint_group_admits_only_https_from_the_vpc(network_template: Template) -> None:
    group_id = _group_logical_id(network_template, "^VPC interface endpoints")
    group = network_template.find_resources("AWS::EC2::SecurityGroup")[group_id]
    assert group["Properties"]["SecurityGroupIngress"] == [
        {
            "CidrIp": "10.0.0.0/16",
            "Description": "HTTPS from the VPC",
            "FromPort": 443,
            "IpProtocol": "tcp",
            "ToPort": 443,
        }
    ]


def test_bring_your_own_vpc_imports_instead_of_creating() -> None:
    _, deployment = make_app(
        {
            "vpc_id": "vpc-0123456789abcdef0",
            "vpc_cidr": "10.20.0.0/16",
            "private_subnet_ids": ["subnet-0aaaaaaaaaaaaaaaa", "subnet-0bbbbbbbbbbbbbbbb"],
            "private_route_table_ids": ["rtb-0aaaaaaaaaaaaaaaa", "rtb-0bbbbbbbbbbbbbbbb"],
            "availability_zones": TEST_ZONES,
        }
    )
    template = Template.from_stack(deployment.network)
    for resource_type in ("AWS::EC2::VPC", "AWS::EC2::Subnet", "AWS::EC2::NatGateway", "AWS::EC2::InternetGateway"):
        template.resource_count_is(resource_type, 0)
    template.has_resource_properties("AWS::EC2::SecurityGroup", {"VpcId": "vpc-0123456789abcdef0"})
    template.has_resource_properties(
        "AWS::EC2::VPCEndpoint",
        {"VpcEndpointType": "Interface", "SubnetIds": ["subnet-0aaaaaaaaaaaaaaaa", "subnet-0bbbbbbbbbbbbbbbb"]},
    )
    template.has_resource_properties(
        "AWS::EC2::VPCEndpoint",
        {"VpcEndpointType": "Gateway", "RouteTableIds": ["rtb-0aaaaaaaaaaaaaaaa", "rtb-0bbbbbbbbbbbbbbbb"]},
    )
    template.has_resource_properties("AWS::EC2::FlowLog", {"ResourceId": "vpc-0123456789abcdef0"})
