"""The network a deployment runs in: VPC (created or imported), endpoints, flow logs, security groups."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from constructs import Construct

from mtrl.settings.network import NetworkSettings
from stacks.constructs.encrypted_log_group import EncryptedLogGroup
from stacks.nag import acknowledge

# Interface endpoints the workloads call from private subnets (HyperPod nodes, reward workers, Lambdas).
INTERFACE_ENDPOINTS: dict[str, ec2.InterfaceVpcEndpointAwsService] = {
    "EcrApi": ec2.InterfaceVpcEndpointAwsService.ECR,
    "EcrDocker": ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
    "Sts": ec2.InterfaceVpcEndpointAwsService.STS,
    "CloudWatchLogs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    "Sqs": ec2.InterfaceVpcEndpointAwsService.SQS,
    "SageMakerApi": ec2.InterfaceVpcEndpointAwsService.SAGEMAKER_API,
    "SageMakerRuntime": ec2.InterfaceVpcEndpointAwsService.SAGEMAKER_RUNTIME,
    "Eks": ec2.InterfaceVpcEndpointAwsService.EKS,
    "Kms": ec2.InterfaceVpcEndpointAwsService.KMS,
}


class Network(Construct):
    """VPC plus the security groups the cluster, reward workers and endpoints use.

    Attributes: ``vpc``, ``private_subnets``, ``hyperpod_security_group``,
    ``reward_worker_security_group``, ``endpoint_security_group``, ``flow_log_group`` (or None).
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        settings: NetworkSettings,
        prefix: str,
        encryption_key: kms.IKey,
    ) -> None:
        super().__init__(scope, id_)
        self.vpc = self._import_vpc(settings) if settings.vpc_id else self._create_vpc(settings, prefix)
        # Without a NAT gateway the private subnets are isolated (no egress): the Fargate tasks that need AWS APIs
        # and the model hub (the sessions loop) run in the public subnets with a public IP instead. That costs
        # nothing at rest, where the interface endpoints they would otherwise need cost USD 7.30 a month per
        # service and AZ (docs/operations.md, "Costs").
        self.nat = settings.nat_gateways != "none"
        private = self.vpc.private_subnets if self.nat or settings.vpc_id else self.vpc.isolated_subnets
        self.private_subnets = ec2.SubnetSelection(subnets=private)
        self.task_subnets = private if self.nat or settings.vpc_id else self.vpc.public_subnets
        self.tasks_need_public_ip = not self.nat and settings.vpc_id is None

        self.hyperpod_security_group = ec2.SecurityGroup(
            self,
            "HyperPodSecurityGroup",
            vpc=self.vpc,
            description="HyperPod nodes: all traffic among members (EFA and NCCL need it), all egress",
            allow_all_outbound=True,
        )
        # EFA requires every member to reach every other member on all protocols (egress is already open).
        self.hyperpod_security_group.add_ingress_rule(
            self.hyperpod_security_group, ec2.Port.all_traffic(), "EFA/NCCL traffic between cluster members"
        )
        self.reward_worker_security_group = ec2.SecurityGroup(
            self,
            "RewardWorkerSecurityGroup",
            vpc=self.vpc,
            description="Reward workers: no inbound traffic, outbound only",
            allow_all_outbound=True,
        )
        # With the EKS endpoint's private access (eks_endpoint_access, default), the Nova Forge runner task (reward
        # cluster, this group) reaches the Kubernetes API through the endpoint's interfaces, which carry the cluster's
        # security group (the one above): HTTPS from this group only.
        self.hyperpod_security_group.add_ingress_rule(
            self.reward_worker_security_group, ec2.Port.tcp(443), "Kubernetes API (private EKS endpoint) from tasks"
        )
        self.endpoint_security_group = ec2.SecurityGroup(
            self,
            "EndpointSecurityGroup",
            vpc=self.vpc,
            description="VPC interface endpoints: HTTPS from inside the VPC",
            allow_all_outbound=False,
        )
        self.endpoint_security_group.add_ingress_rule(
            ec2.Peer.ipv4(settings.vpc_cidr), ec2.Port.tcp(443), "HTTPS from the VPC"
        )

        # The S3 gateway endpoint is free and keeps S3 traffic (ECR image layers included) off the NAT: always.
        if settings.vpc_id is None or settings.private_route_table_ids:
            self.vpc.add_gateway_endpoint(
                "S3Endpoint",
                service=ec2.GatewayVpcEndpointAwsService.S3,
                # Without a NAT gateway the tasks sit in the public subnets: their S3 traffic takes the endpoint too.
                subnets=[self.private_subnets, *([] if self.nat else [ec2.SubnetSelection(subnets=self.task_subnets)])],
            )
        if settings.create_vpc_endpoints:
            self._add_interface_endpoints()

        self.flow_log_group = None
        if not settings.enable_flow_logs and settings.vpc_id is None:
            # A documented cost lever (docs/operations.md, "Costs"): the operator chose to go without flow logs.
            acknowledge(
                self.vpc,
                "AwsSolutions-VPC7",
                "Flow logs are off because the operator set enable_flow_logs=false (a documented cost lever for "
                "sandbox accounts); set it to true to record the VPC's traffic",
            )
        if settings.enable_flow_logs:
            flow_logs = EncryptedLogGroup(
                self,
                "FlowLogs",
                log_group_name=f"/{prefix}/vpc/flow-logs",
                encryption_key=encryption_key,
                retention_days=settings.flow_log_retention_days,
            )
            self.flow_log_group = flow_logs.log_group
            ec2.FlowLog(
                self,
                "FlowLog",
                resource_type=ec2.FlowLogResourceType.from_vpc(self.vpc),
                destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs.log_group),
                traffic_type=ec2.FlowLogTrafficType.ALL,
            )

    def _create_vpc(self, settings: NetworkSettings, prefix: str) -> ec2.IVpc:
        zones = settings.availability_zones or None
        nat_count = {"single": 1, "none": 0}.get(settings.nat_gateways, len(zones or []) or settings.az_count)
        return ec2.Vpc(
            self,
            "Vpc",
            vpc_name=f"{prefix}-vpc",
            ip_addresses=ec2.IpAddresses.cidr(settings.vpc_cidr),
            availability_zones=zones,
            max_azs=None if zones else settings.az_count,
            nat_gateways=nat_count,
            restrict_default_security_group=True,
            subnet_configuration=[
                # Public subnets hold the NAT gateways, and, without one, the sessions loop's tasks.
                ec2.SubnetConfiguration(
                    name="Public",
                    subnet_type=ec2.SubnetType.PUBLIC,
                    cidr_mask=settings.public_subnet_cidr_mask,
                ),
                ec2.SubnetConfiguration(
                    name="Private",
                    subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS if nat_count else ec2.SubnetType.PRIVATE_ISOLATED,
                    cidr_mask=settings.private_subnet_cidr_mask,
                ),
            ],
        )

    def _import_vpc(self, settings: NetworkSettings) -> ec2.IVpc:
        assert settings.vpc_id is not None
        return ec2.Vpc.from_vpc_attributes(
            self,
            "Vpc",
            vpc_id=settings.vpc_id,
            vpc_cidr_block=settings.vpc_cidr,
            availability_zones=settings.availability_zones,
            private_subnet_ids=settings.private_subnet_ids,
            private_subnet_route_table_ids=settings.private_route_table_ids or None,
        )

    def _add_interface_endpoints(self) -> None:
        stack = cdk.Stack.of(self)
        # Not every endpoint service is offered in every AZ (e.g. some are missing in use1-az3), and an endpoint
        # with a subnet in such an AZ fails to create. With a known account and region, CDK looks up each
        # service's AZs at synth (DescribeVpcEndpointServices, cached in cdk.context.json) and places the endpoint
        # in the supported ones only; clients in the other AZs reach it through its private DNS name. An
        # account-agnostic synth cannot look up (it is for offline checks, never deployed as is).
        lookup = not cdk.Token.is_unresolved(stack.account) and not cdk.Token.is_unresolved(stack.region)
        for name, service in INTERFACE_ENDPOINTS.items():
            ec2.InterfaceVpcEndpoint(
                self,
                f"{name}Endpoint",
                vpc=self.vpc,
                service=service,
                subnets=self.private_subnets,
                security_groups=[self.endpoint_security_group],
                private_dns_enabled=True,
                lookup_supported_azs=lookup,
                # Our endpoint security group already admits 443 from the VPC CIDR; no second rule.
                open=False,
            )
        cdk.Tags.of(self).add("mtrl:component", "network")
