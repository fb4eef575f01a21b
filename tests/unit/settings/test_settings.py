"""The deploy settings: defaults, every kind of bad value, CDK context decoding, the generated docs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mtrl.settings import DeploySettings, SettingsError, load_settings
from mtrl.settings.docs import render_configuration_reference

REPO_ROOT = Path(__file__).resolve().parents[3]


def _error_for(context: dict[str, Any]) -> str:
    with pytest.raises(SettingsError) as caught:
        load_settings(context, environ={})
    return str(caught.value)


def test_defaults_are_valid_and_documented() -> None:
    settings = load_settings({}, environ={})
    assert settings.prefix == "mtrl"
    assert settings.region == "us-east-1"
    assert settings.vpc_cidr == "10.0.0.0/16"
    for name, field in DeploySettings.model_fields.items():
        assert field.description, f"setting {name} has no description"
        assert len(field.description) > 15, f"setting {name} needs a real description"


def test_cdk_internal_context_keys_are_ignored() -> None:
    context = {
        "@aws-cdk/core:checkSecretUsage": True,
        "aws:cdk:enable-path-metadata": True,
        "availability-zones:account=123456789012:region=us-east-1": ["us-east-1a"],
        "acknowledged-issue-numbers": [1],
    }
    assert load_settings(context, environ={}) == load_settings({}, environ={})


@pytest.mark.parametrize(
    ("context", "expected"),
    [
        ({"vpc_cdir": "10.0.0.0/16"}, "setting 'vpc_cdir': unknown setting (did you mean 'vpc_cidr'?)"),
        ({"vpc_cidr": "10.0.0.0/33"}, "setting 'vpc_cidr': not a valid IPv4 CIDR"),
        ({"vpc_cidr": "10.0.0.1/16"}, "setting 'vpc_cidr': not a valid IPv4 CIDR"),
        ({"vpc_cidr": "8.8.0.0/16"}, "setting 'vpc_cidr': VPC CIDR must be a private"),
        ({"vpc_cidr": "10.0.0.0/8"}, "setting 'vpc_cidr': VPC CIDR prefix length must be between /16 and /24"),
        ({"region": "mars-north-1"}, "setting 'region': unknown AWS region"),
        ({"account": "12345"}, "setting 'account': must be a 12-digit AWS account id"),
        ({"az_count": -1}, "setting 'az_count': Input should be greater than or equal to 2"),
        ({"az_count": "three"}, "setting 'az_count': Input should be a valid integer"),
        ({"nat_gateways": "many"}, "setting 'nat_gateways': Input should be 'per_az', 'single' or 'none'"),
        ({"prefix": "Bad_Prefix"}, "setting 'prefix': String should match pattern"),
        ({"flow_log_retention_days": 42}, "setting 'flow_log_retention_days': CloudWatch Logs accepts only"),
        ({"noncurrent_version_expiration_days": 0}, "setting 'noncurrent_version_expiration_days'"),
        ({"enable_flow_logs": "perhaps"}, "setting 'enable_flow_logs': Input should be a valid boolean"),
        ({"availability_zones": ["us-east-1a"]}, "setting 'availability_zones': at least 2 are required"),
        (
            {"availability_zones": ["us-east-1a", "eu-west-1b"]},
            "setting 'availability_zones': ['eu-west-1b'] are not in region 'us-east-1'",
        ),
        ({"vpc_id": "vpc-0abc"}, "setting 'private_subnet_ids': required when vpc_id is set"),
        ({"run_instance_count": 2}, "setting 'run_instance_count': 2 is above the run_count 1 of the instance group"),
        ({"vpc_id": "my-vpc"}, "setting 'vpc_id': must look like"),
        (
            {"private_subnet_cidr_mask": 17, "az_count": 3},
            "setting 'private_subnet_cidr_mask': 3 AZs x (/17 private + /24 public) need",
        ),
    ],
)
def test_bad_values_fail_with_one_message_naming_the_key(context: dict[str, Any], expected: str) -> None:
    message = _error_for(context)
    assert message.startswith("invalid configuration: ")
    assert expected in message


def test_several_problems_are_all_reported() -> None:
    message = _error_for({"region": "nowhere", "az_count": 0})
    assert "2 problems" in message
    assert "'region'" in message
    assert "'az_count'" in message


def test_cli_strings_are_decoded_like_cdk_json_values() -> None:
    settings = load_settings(
        {
            "az_count": "3",
            "enable_flow_logs": "false",
            "availability_zones": '["us-east-1a", "us-east-1b", "us-east-1c"]',
            "private_subnet_cidr_mask": "19",
        },
        environ={},
    )
    assert settings.az_count == 3
    assert settings.enable_flow_logs is False
    assert settings.availability_zones == ["us-east-1a", "us-east-1b", "us-east-1c"]
    comma_list = load_settings({"availability_zones": "us-east-1a,us-east-1b"}, environ={})
    assert comma_list.availability_zones == ["us-east-1a", "us-east-1b"]


def test_broken_json_in_an_override_is_reported() -> None:
    assert "setting 'availability_zones': value is not valid JSON" in _error_for({"availability_zones": '["a",'})


def test_environment_supplies_account_and_region_unless_set() -> None:
    environ = {"CDK_DEFAULT_ACCOUNT": "123456789012", "CDK_DEFAULT_REGION": "eu-west-1"}
    from_env = load_settings({}, environ=environ)
    assert (from_env.account, from_env.region) == ("123456789012", "eu-west-1")
    explicit = load_settings({"region": "us-west-2"}, environ=environ)
    assert explicit.region == "us-west-2"


def test_bring_your_own_vpc_needs_matching_subnets_and_zones() -> None:
    settings = load_settings(
        {
            "vpc_id": "vpc-0123456789abcdef0",
            "private_subnet_ids": ["subnet-0aaa", "subnet-0bbb"],
            "availability_zones": ["us-east-1a", "us-east-1b"],
        },
        environ={},
    )
    assert settings.vpc_id == "vpc-0123456789abcdef0"
    message = _error_for(
        {
            "vpc_id": "vpc-0123",
            "private_subnet_ids": ["subnet-0aaa"],
            "availability_zones": ["us-east-1a", "us-east-1b"],
        }
    )
    assert "list one AZ per entry of private_subnet_ids" in message


def test_settings_are_immutable() -> None:
    settings = load_settings({}, environ={})
    with pytest.raises(ValueError, match="frozen"):
        settings.prefix = "other"  # type: ignore[misc]


def test_configuration_reference_is_up_to_date() -> None:
    committed = (REPO_ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == render_configuration_reference(), "docs/configuration.md is stale: run `make docs`"


def test_configuration_reference_lists_every_setting() -> None:
    reference = render_configuration_reference()
    for name in DeploySettings.model_fields:
        assert f"| `{name}` |" in reference


def test_validator_names_are_unique_across_groups() -> None:
    """Groups are mixed into one model: a repeated validator name would silently disable one of them."""
    from mtrl.settings.deploy import SETTINGS_GROUPS

    seen: dict[str, str] = {}
    for group in SETTINGS_GROUPS:
        for name in group.__pydantic_decorators__.field_validators | group.__pydantic_decorators__.model_validators:
            assert name not in seen or seen[name] == group.__name__, f"{name} in {group.__name__} and {seen[name]}"
            seen.setdefault(name, group.__name__)
