"""cdk-nag 3.x wiring: checks run as a validation plugin on every synth; acknowledgments stay narrow."""

from __future__ import annotations

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct


def enable_checks(app: cdk.App) -> None:
    """Run the AwsSolutions rule pack on every synth (unacknowledged findings fail the synth)."""
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))


def acknowledge(construct: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge one finding on one construct (never a stack), with the reason it is acceptable."""
    if isinstance(construct, cdk.Stack | cdk.Stage):
        raise ValueError(f"acknowledge {rule} on the construct it concerns, not on {construct.node.path}")
    if len(reason) < 20:
        raise ValueError(f"acknowledgment of {rule} needs a real reason")
    cdk.Validations.of(construct).acknowledge(cdk.Acknowledgment(id=rule, reason=reason))
