"""Network stack: VPC layout, endpoints, flow logs, security groups, bring-your-own VPC."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from mtrl.settings import SettingsError, load_settings
from stacks.constructs.network import INTERFACE_ENDPOINTS
from tests.conftest import TEST_ZONES, endpoint_service_context_key, make_app


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


def test_by_default_only_the_free_s3_gateway_endpoint(network_template: Template) -> None:
    # Issue 36 item 3: nine interface endpoints in two AZs cost about USD 131 a month at rest; with the S3 gateway
    # endpoint they pay off only above about 417 GB a month per service (docs/operations.md, "Costs").
    (endpoint,) = network_template.find_resources("AWS::EC2::VPCEndpoint").values()
    assert endpoint["Properties"]["VpcEndpointType"] == "Gateway"
    assert endpoint["Properties"]["ServiceName"]["Fn::Join"][1][-1] == ".s3"


@pytest.fixture(scope="module")
def endpoints_template() -> Template:
    _, deployment = make_app({"create_vpc_endpoints": True})
    return Template.from_stack(deployment.network)


def test_endpoints_cover_the_workloads(endpoints_template: Template) -> None:
    endpoints_template.has_resource_properties(
        "AWS::EC2::VPCEndpoint",
        {"VpcEndpointType": "Gateway", "ServiceName": {"Fn::Join": ["", Match.array_with([".s3"])]}},
    )
    interface = [
        e["Properties"]
        for e in endpoints_template.find_resources("AWS::EC2::VPCEndpoint").values()
        if e["Properties"].get("VpcEndpointType") == "Interface"
    ]
    assert len(interface) == len(INTERFACE_ENDPOINTS)
    assert all(e["PrivateDnsEnabled"] is True for e in interface)
    names = {str(e["ServiceName"]) for e in interface}
    for suffix in ("ecr.api", "ecr.dkr", "sts", "logs", "sqs", "sagemaker.api", "sagemaker.runtime", "eks", "kms"):
        assert any(name.endswith(f"{suffix}") or f".{suffix}" in name for name in names), suffix


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
            "create_vpc_endpoints": True,
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


# -- az_count and NAT settings that synth cannot honour (issue 11, defects 10 and 11) ---------------------------


def test_az_count_above_two_without_zone_names_is_refused_on_an_account_agnostic_synth() -> None:
    # CDK Developer Guide, "Environments for the AWS CDK": an environment-agnostic stack's availabilityZones is two
    # tokens (Fn::Select 0 and 1 of Fn::GetAZs), so az_count=3 would silently give a 2-AZ VPC.
    with pytest.raises(SettingsError, match=r"setting 'az_count': 3 AZs need their names: pass availability_zones"):
        load_settings({"az_count": "3"}, environ={})
    named = load_settings({"az_count": "3", "availability_zones": "us-east-1a,us-east-1b,us-east-1c"}, environ={})
    assert len(named.availability_zones) == 3
    assert load_settings({"az_count": "3"}, environ={"CDK_DEFAULT_ACCOUNT": "123456789012"}).az_count == 3


def test_az_count_three_with_a_known_account_spans_three_zones() -> None:
    _, deployment = make_app({"az_count": 3})
    private = _subnets(Template.from_stack(deployment.network), public=False)
    assert sorted(s["AvailabilityZone"] for s in private) == [*TEST_ZONES, "us-east-1c"]


@pytest.mark.parametrize("value", ["none", "None", "NONE", "null"])
def test_nat_gateways_none_is_refused_with_the_reason(value: str) -> None:
    # "null" resets a setting to its default everywhere else; for a choice setting it is a bare word too.
    with pytest.raises(SettingsError, match=r"setting 'nat_gateways': .*(not supported|Input should be)"):
        load_settings({"nat_gateways": value}, environ={})
    with pytest.raises(SettingsError) as refused:
        load_settings({"nat_gateways": "none"}, environ={})
    assert "internet egress" in str(refused.value)
    assert "'single'" in str(refused.value)


# -- interface endpoints only where their service exists (issue 11, defect 9) -----------------------------------


def _endpoint_subnet_zones(template: Template, service: str) -> list[str]:
    zone_of = {
        lid: r["Properties"]["AvailabilityZone"] for lid, r in template.find_resources("AWS::EC2::Subnet").items()
    }
    (endpoint,) = [
        e["Properties"]
        for e in template.find_resources("AWS::EC2::VPCEndpoint").values()
        if e["Properties"].get("VpcEndpointType") == "Interface"
        and str(e["Properties"]["ServiceName"]).endswith(service)
    ]
    return sorted(zone_of[subnet["Ref"]] for subnet in endpoint["SubnetIds"])


def test_an_endpoint_skips_the_zones_its_service_is_not_offered_in() -> None:
    # AWS PrivateLink Guide, "Access an AWS service using an interface VPC endpoint" (and the Knowledge Center
    # article "interface-endpoint-availability-zone"): an endpoint service is available in particular AZs only, and
    # creating an endpoint with a subnet in any other AZ fails ("The VPC endpoint service ... does not support the
    # Availability Zone of the subnet"). CDK: InterfaceVpcEndpoint lookup_supported_azs (DescribeVpcEndpointServices).
    _, deployment = make_app(
        {"create_vpc_endpoints": True, endpoint_service_context_key("eks"): ["us-east-1a", "us-east-1c"]}
    )
    template = Template.from_stack(deployment.network)
    assert _endpoint_subnet_zones(template, "eks") == ["us-east-1a"]
    assert _endpoint_subnet_zones(template, "kms") == TEST_ZONES


def test_an_endpoint_whose_service_is_in_none_of_the_zones_fails_the_synth() -> None:
    with pytest.raises(RuntimeError, match=r"lookupSupportedAzs returned us-east-1c but subnets have AZs"):
        make_app({"create_vpc_endpoints": True, endpoint_service_context_key("sagemaker.api"): ["us-east-1c"]})


def test_an_account_agnostic_synth_places_endpoints_without_a_lookup() -> None:
    # Offline (no account): nothing to look up; every private subnet gets the endpoint (documented in
    # docs/operations.md, "Availability zones and VPC endpoints").
    _, deployment = make_app({"account": None, "create_vpc_endpoints": True})
    template = Template.from_stack(deployment.network)
    interface = [
        e["Properties"]
        for e in template.find_resources("AWS::EC2::VPCEndpoint").values()
        if e["Properties"].get("VpcEndpointType") == "Interface"
    ]
    assert len(interface) == len(INTERFACE_ENDPOINTS)
    assert all(len(e["SubnetIds"]) == 2 for e in interface)
