"""Typed, validated deploy-time configuration shared by the CDK app, the Lambdas and the CLI."""

from mtrl.settings.base import SettingsError
from mtrl.settings.deploy import DeploySettings, load_settings, parse_overrides, read_cdk_json_context

__all__ = ["DeploySettings", "SettingsError", "load_settings", "parse_overrides", "read_cdk_json_context"]
