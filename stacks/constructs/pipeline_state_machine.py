"""The run state machine, deployed from ``statemachine/pipeline.asl.json`` (the file tests execute locally)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from mtrl.settings.pipeline import PipelineSettings
from stacks.constructs.encrypted_log_group import EncryptedLogGroup
from stacks.nag import acknowledge

ASL_PATH = Path(__file__).resolve().parents[2] / "statemachine" / "pipeline.asl.json"
# Substitution name → the function the state calls.
SUBSTITUTIONS = (
    "RegisterFunctionArn",
    "AcquireSlotFunctionArn",
    "ValidateFunctionArn",
    "BackendFunctionArn",
    "ReportFunctionArn",
)
LONGEST_RUN_MINUTES = 7 * 24 * 60  # the largest run_timeout_minutes a manifest may ask for


def load_definition(settings: PipelineSettings) -> dict[str, Any]:
    """The ASL document with the execution-wide backstop timeout set from the settings.

    Within a run, the run timeout is enforced by CheckStatus (job cancelled, then teardown); this
    backstop only catches an execution that is stuck anyway (the reaper then tears it down).
    """
    definition: dict[str, Any] = json.loads(ASL_PATH.read_text(encoding="utf-8"))
    definition["TimeoutSeconds"] = (settings.slot_max_wait_minutes + LONGEST_RUN_MINUTES + 24 * 60) * 60
    return definition


class PipelineStateMachine(Construct):
    """Attributes: ``state_machine``, ``log_group``."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        prefix: str,
        settings: PipelineSettings,
        functions: dict[str, lambda_.IFunction],
        key: kms.IKey,
        log_retention_days: int,
    ) -> None:
        super().__init__(scope, id_)
        missing = set(SUBSTITUTIONS) - set(functions)
        if missing:
            raise ValueError(f"state machine substitutions without a function: {sorted(missing)}")
        self.log_group = EncryptedLogGroup(
            self,
            "Logs",
            log_group_name=f"/{prefix}/pipeline/state-machine",
            encryption_key=key,
            retention_days=log_retention_days,
        ).log_group
        role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("states.amazonaws.com"))
        role.add_to_policy(
            iam.PolicyStatement(
                sid="InvokePhaseFunctions",
                actions=["lambda:InvokeFunction"],
                resources=[function.function_arn for function in functions.values()],  # unqualified only
            )
        )
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            state_machine_name=f"{prefix}-training-run",
            definition_body=sfn.DefinitionBody.from_string(json.dumps(load_definition(settings))),
            definition_substitutions={name: functions[name].function_arn for name in SUBSTITUTIONS},
            state_machine_type=sfn.StateMachineType.STANDARD,
            logs=sfn.LogOptions(destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=True),
            tracing_enabled=True,
            role=role,
        )
        # No key grant: CloudWatch Logs encrypts the log group itself (the key policy allows it), and
        # execution data uses the service's own encryption.
        policy = role.node.find_child("DefaultPolicy")
        acknowledge(
            policy,
            "AwsSolutions-IAM5[Resource::*]",
            "Step Functions log delivery (logs:*LogDelivery*, DescribeLogGroups) and X-Ray tracing "
            "actions support no resource-level permissions.",
        )
        cdk.Tags.of(self.state_machine).add("mtrl:component", "pipeline")
