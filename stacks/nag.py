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


def nag_resource(scope: IConstruct, value: str) -> str:
    """How cdk-nag spells a (possibly tokenized) resource in a finding id, e.g. ``<Bucket1234.Arn>/runs/*``.

    Lets acknowledgments name the exact wildcard resource without hard-coding account, region or logical ids.
    """
    return _flatten(cdk.Stack.of(scope).resolve(value))


def asset_bucket_objects(stack: cdk.Stack) -> str:
    """Objects of the CDK bootstrap asset bucket (where staged assets are uploaded)."""
    synthesizer = stack.synthesizer
    if not isinstance(synthesizer, cdk.DefaultStackSynthesizer):
        raise TypeError("BucketDeployment grants expect the default stack synthesizer")
    name = (
        cdk.DefaultStackSynthesizer.DEFAULT_FILE_ASSETS_BUCKET_NAME.replace(
            "${Qualifier}", synthesizer.bootstrap_qualifier or cdk.DefaultStackSynthesizer.DEFAULT_QUALIFIER
        )
        .replace("${AWS::AccountId}", stack.account)
        .replace("${AWS::Region}", stack.region)
    )
    return f"arn:{stack.partition}:s3:::{name}/*"


def _flatten(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((kind, arg),) = value.items()
        if kind == "Fn::Join":
            return str(arg[0]).join(_flatten(part) for part in arg[1])
        if kind == "Ref":
            return f"<{arg}>"
        if kind == "Fn::GetAtt":
            return f"<{arg[0]}.{arg[1]}>"
        if kind == "Fn::ImportValue":
            return _flatten(arg)
    raise ValueError(f"cannot spell {value!r} the way cdk-nag does")
