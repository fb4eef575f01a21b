"""Typed, validated deploy-time configuration shared by the CDK app, the Lambdas and the CLI.

The names below are imported from their modules on first use, so that ``mtrl.settings.pipeline`` (a Lambda's and
`mtrl validate`'s) loads without every other settings model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mtrl.contracts.lazy import lazy_names

if TYPE_CHECKING:
    from mtrl.settings.base import SettingsError
    from mtrl.settings.deploy import DeploySettings, load_settings, parse_overrides, read_cdk_json_context

__all__ = ["DeploySettings", "SettingsError", "load_settings", "parse_overrides", "read_cdk_json_context"]

_MODULE_OF = {
    "SettingsError": "mtrl.settings.base",
    "DeploySettings": "mtrl.settings.deploy",
    "load_settings": "mtrl.settings.deploy",
    "parse_overrides": "mtrl.settings.deploy",
    "read_cdk_json_context": "mtrl.settings.deploy",
}

__getattr__ = lazy_names(__name__, globals(), _MODULE_OF)
