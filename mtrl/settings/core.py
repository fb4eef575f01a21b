"""Settings every stack shares: naming and the target environment."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from mtrl.settings.aws_facts import KNOWN_REGIONS
from mtrl.settings.base import SettingsGroup

_ACCOUNT = re.compile(r"^\d{12}$")


class CoreSettings(SettingsGroup):
    """Naming and the target account and region."""

    prefix: str = Field(
        "mtrl",
        description="Name prefix for every stack and named resource, so several deployments can share an account.",
        pattern=r"^[a-z][a-z0-9-]{1,18}[a-z0-9]$",
    )
    deployment_profile: Literal["standard", "serverless"] = Field(
        "standard",
        description="'standard': the cluster, one NAT gateway and the S3 gateway endpoint (about USD 116 a month at "
        "rest in us-east-1, `mtrl cost --at-rest`). 'serverless': no EKS, no HyperPod, no NAT gateway "
        "(deploy_cluster=false, nat_gateways=none, run_backend=serverless unless set): the serverless, sessions and "
        "local backends only, about USD 5 a month at rest. Settings given explicitly win over the profile's.",
    )
    account: str | None = Field(
        None,
        description="Target AWS account id; empty means CDK_DEFAULT_ACCOUNT (the CLI's credentials), "
        "or an account-agnostic synth when there are none.",
    )
    region: str = Field(
        "us-east-1",
        description="Target AWS region; CDK_DEFAULT_REGION is used when this is not set explicitly.",
    )

    @field_validator("account")
    @classmethod
    def _account_is_twelve_digits(cls, value: str | None) -> str | None:
        if value is not None and not _ACCOUNT.match(value):
            raise ValueError("must be a 12-digit AWS account id")
        return value

    @field_validator("region")
    @classmethod
    def _region_is_known(cls, value: str) -> str:
        if value not in KNOWN_REGIONS:
            raise ValueError("unknown AWS region (expected e.g. 'us-east-1')")
        return value
