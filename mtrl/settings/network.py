"""Network settings: the VPC mtrl creates, or the one it imports."""

from __future__ import annotations

import ipaddress
from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from mtrl.settings.aws_facts import LOG_RETENTION_DAYS
from mtrl.settings.base import SettingsGroup


class NetworkSettings(SettingsGroup):
    """The VPC mtrl creates (or imports with `vpc_id`), its endpoints and flow logs."""

    vpc_cidr: str = Field(
        "10.0.0.0/16",
        description="IPv4 CIDR of the created VPC (the imported VPC's CIDR when vpc_id is set).",
    )
    az_count: int = Field(
        2,
        ge=2,
        le=6,
        description="Number of availability zones the VPC spans (HyperPod and EKS need at least 2).",
    )
    availability_zones: list[str] = Field(
        default_factory=list,
        description="Explicit AZ names; empty means the first az_count AZs of the account/region "
        "(looked up by CDK; with no credentials the synth stays AZ-agnostic).",
    )
    nat_gateways: Literal["per_az", "single", "none"] = Field(
        "single",
        description="One NAT gateway per AZ (resilient), a single shared one (cheaper: about USD 36.50 a month with "
        "its public IPv4 address), or 'none', only without a cluster (deploy_cluster=false, the serverless "
        "profile): the deploy-time Helm installer, HyperPod nodes and the Nova Forge runner need internet egress. "
        "With 'none' the private subnets are isolated and the sessions loop task runs in a public subnet with a "
        "public IP (no inbound rule).",
    )
    private_subnet_cidr_mask: int = Field(
        18,
        ge=16,
        le=24,
        description="Prefix length of each private subnet; HyperPod pods take VPC IPs, so keep these large "
        "(/18 = 16,379 addresses per AZ).",
    )
    public_subnet_cidr_mask: int = Field(
        24, ge=20, le=28, description="Prefix length of each public subnet (they hold only NAT gateways)."
    )
    create_vpc_endpoints: bool = Field(
        False,
        description="Create the interface endpoints (ECR API and Docker, STS, Logs, SQS, SageMaker API and Runtime, "
        "EKS, KMS) in every AZ: about USD 131 a month at rest in 2 AZs. Off by default: with the S3 gateway endpoint "
        "(free, always created) they pay for themselves only above about 417 GB a month per service through the NAT "
        "(docs/operations.md, 'Costs').",
    )
    enable_flow_logs: bool = Field(True, description="Send VPC flow logs to a KMS-encrypted CloudWatch log group.")
    flow_log_retention_days: int = Field(90, description="Retention of the VPC flow-log group, in days.")
    vpc_id: str | None = Field(
        None,
        description="Bring your own VPC: import this VPC instead of creating one (needs private_subnet_ids).",
    )
    private_subnet_ids: list[str] = Field(
        default_factory=list,
        description="With vpc_id: the private subnets to use, one per AZ, in the order of availability_zones.",
    )

    private_route_table_ids: list[str] = Field(
        default_factory=list,
        description="With vpc_id: route tables of the private subnets (needed for the S3 gateway endpoint).",
    )

    @field_validator("vpc_cidr")
    @classmethod
    def _cidr_is_private_ipv4(cls, value: str) -> str:
        try:
            network = ipaddress.IPv4Network(value, strict=True)
        except ValueError as error:
            raise ValueError(f"not a valid IPv4 CIDR: {error}") from None
        if not 16 <= network.prefixlen <= 24:
            raise ValueError("VPC CIDR prefix length must be between /16 and /24 (AWS VPC limits)")
        if not network.is_private:
            raise ValueError("VPC CIDR must be a private (RFC 1918) range")
        return value

    @field_validator("flow_log_retention_days")
    @classmethod
    def _flow_log_retention_is_allowed(cls, value: int) -> int:
        return check_retention_days(value)

    @field_validator("vpc_id")
    @classmethod
    def _vpc_id_shape(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("vpc-"):
            raise ValueError("must look like 'vpc-0123456789abcdef0'")
        return value

    @model_validator(mode="after")
    def _subnets_fit(self) -> Self:
        if self.availability_zones:
            if len(self.availability_zones) != len(set(self.availability_zones)):
                raise ValueError("availability_zones: contains duplicates")
            if len(self.availability_zones) < 2:
                raise ValueError("availability_zones: at least 2 are required")
        if self.vpc_id is not None:
            if not self.private_subnet_ids:
                raise ValueError("private_subnet_ids: required when vpc_id is set")
            if any(not s.startswith("subnet-") for s in self.private_subnet_ids):
                raise ValueError("private_subnet_ids: each must look like 'subnet-0123456789abcdef0'")
            if len(self.private_subnet_ids) != len(self.availability_zones):
                raise ValueError("availability_zones: with vpc_id, list one AZ per entry of private_subnet_ids")
            return self
        vpc_prefix = ipaddress.IPv4Network(self.vpc_cidr).prefixlen
        if self.private_subnet_cidr_mask <= vpc_prefix:
            raise ValueError(
                f"private_subnet_cidr_mask: /{self.private_subnet_cidr_mask} does not fit in the /{vpc_prefix} VPC"
            )
        zones = len(self.availability_zones) or self.az_count
        needed = zones * (2 ** (32 - self.private_subnet_cidr_mask) + 2 ** (32 - self.public_subnet_cidr_mask))
        available = 2 ** (32 - vpc_prefix)
        if needed > available:
            raise ValueError(
                f"private_subnet_cidr_mask: {zones} AZs x (/{self.private_subnet_cidr_mask} private + "
                f"/{self.public_subnet_cidr_mask} public) need {needed} addresses but vpc_cidr has {available}"
            )
        return self


def check_retention_days(value: int) -> int:
    if value not in LOG_RETENTION_DAYS:
        allowed = ", ".join(str(v) for v in LOG_RETENTION_DAYS)
        raise ValueError(f"CloudWatch Logs accepts only these retention values: {allowed}")
    return value
