"""Emulator settings: synthesize the reduced variant of the app that the embedded AWS emulator can deploy."""

from __future__ import annotations

from pydantic import Field

from mtrl.settings.base import SettingsGroup


class EmulatorSettings(SettingsGroup):
    """The offline demo: a reduced variant of the app that the embedded AWS emulator can deploy (docs/emulator.md)."""

    emulator: bool = Field(
        False,
        description=(
            "Synthesize the reduced variant for the embedded AWS emulator used by `make demo` (no NAT gateway, "
            "EIP, flow logs, default-security-group custom resource or separate security-group ingress rules; "
            "no EKS/HyperPod cluster or reward-worker stacks; no Lambda dependency layer, because the "
            "emulator runs handlers with its own interpreter). For the offline demo only, never for AWS."
        ),
    )
