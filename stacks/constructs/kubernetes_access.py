"""Where the Lambda functions that call the Kubernetes API of a cluster this deployment creates run: in the VPC's
private subnets, each with a security group of its own that the EKS control plane's group admits on HTTPS, so they
reach the cluster's private endpoint and the cluster needs no public one (eks_endpoint_access, default 'private').

Those functions are the deploy-time Helm installer (stacks/constructs/hyperpod_helm.py) and the pipeline's backend
function (the verl adapter's mtrl.kube client). Everything else they reach goes out through the NAT gateway (a
cluster deployment always has one: mtrl/settings/deploy.py) or, for S3, the gateway endpoint: the EKS, SageMaker,
DynamoDB, STS and other AWS APIs, codeload.github.com and the chart repositories, CloudFormation's presigned response
URL (an S3 object). All of it is HTTPS, so the group lets out TCP 443 only; DNS goes to the VPC's resolver, which
security groups do not filter (Amazon VPC User Guide, "Security group rules").
"""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from stacks.nag import acknowledge, nag_resource

# What Lambda needs from a function's execution role to create and remove the function's network interfaces in the
# VPC (AWS Lambda Developer Guide, "Giving Lambda functions access to resources in an Amazon VPC": the EC2 part of the
# AWS managed policy AWSLambdaVPCAccessExecutionRole, without its logs:* on every log group). The describe actions
# work only on every resource; the others are limited to this account and region, the form that guide gives for
# ec2:DeleteNetworkInterface ("arn:aws:ec2:us-west-2:123456789012:*/*").
DESCRIBE_ACTIONS: tuple[str, ...] = ("ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets")
INTERFACE_ACTIONS: tuple[str, ...] = (
    "ec2:CreateNetworkInterface",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
)
NETWORK_INTERFACE_ACTIONS: tuple[str, ...] = DESCRIBE_ACTIONS + INTERFACE_ACTIONS

HTTPS = 443


@dataclass(frozen=True)
class KubernetesApiAccess:
    """The private subnets to place a Kubernetes client in, and the security group the control plane's network
    interfaces (the private endpoint) carry: the cluster's additional group, EksCluster's ``security_group``."""

    vpc: ec2.IVpc
    subnets: ec2.SubnetSelection
    control_plane_security_group: ec2.ISecurityGroup


class KubernetesClientPlacement(Construct):
    """One function's place in the VPC: its security group (HTTPS out, nothing in), the control plane group's rule
    admitting it on 443, and the network-interface permissions of its role.

    Create it before the function (give the function ``vpc``, ``subnets`` and ``security_group``), then call
    ``attach``. Attributes: those three, ``ingress`` (the control plane group's rule, in this construct's stack),
    ``policy``.
    """

    def __init__(self, scope: Construct, id_: str, *, access: KubernetesApiAccess, client: str) -> None:
        super().__init__(scope, id_)
        self.vpc = access.vpc
        self.subnets = access.subnets
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=access.vpc,
            description=f"{client}: HTTPS out only (EKS API, AWS APIs, chart downloads), nothing in",
            allow_all_outbound=False,
        )
        self.security_group.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.tcp(HTTPS), "HTTPS: private EKS endpoint, AWS APIs and downloads via NAT"
        )
        # Declared here, in the function's stack, so the function can depend on it: created before the function is
        # first invoked, removed only after the function (the Helm release's Delete still calls the cluster).
        self.ingress = ec2.CfnSecurityGroupIngress(
            self,
            "ControlPlaneIngress",
            group_id=access.control_plane_security_group.security_group_id,
            source_security_group_id=self.security_group.security_group_id,
            ip_protocol="tcp",
            from_port=HTTPS,
            to_port=HTTPS,
            description=f"Kubernetes API (private EKS endpoint) from {client}",
        )
        stack = cdk.Stack.of(self)
        in_account = f"arn:{stack.partition}:ec2:{stack.region}:{stack.account}:*/*"
        self.policy = iam.Policy(
            self,
            "NetworkInterfaces",
            statements=[
                iam.PolicyStatement(sid="DescribeForVpcAccess", actions=list(DESCRIBE_ACTIONS), resources=["*"]),
                iam.PolicyStatement(sid="ManageOwnInterfaces", actions=list(INTERFACE_ACTIONS), resources=[in_account]),
            ],
        )
        acknowledge(
            self.policy,
            "AwsSolutions-IAM5[Resource::*]",
            "ec2:DescribeNetworkInterfaces and ec2:DescribeSubnets work only on every resource (AWS Lambda Developer "
            "Guide, VPC access); Lambda calls them with the execution role to place the function in the VPC.",
        )
        acknowledge(
            self.policy,
            f"AwsSolutions-IAM5[Resource::{nag_resource(self, in_account)}]",
            "Lambda creates and removes the function's VPC network interfaces with its execution role; their ids are "
            "not known in advance, so the grant is this account and region, as the AWS Lambda Developer Guide shows.",
        )

    def attach(self, function: lambda_.Function, role: iam.IRole) -> None:
        """Give ``role`` the network-interface permissions before the function exists (Lambda checks them when it
        creates the function), and make the function wait for the control plane group's rule."""
        self.policy.attach_to_role(role)
        function.node.add_dependency(self.policy, self.ingress)
