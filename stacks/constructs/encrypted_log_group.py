"""A CloudWatch log group encrypted with the deployment's key, with a bounded retention."""

from __future__ import annotations

import re

import aws_cdk as cdk
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct


class EncryptedLogGroup(Construct):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        log_group_name: str,
        encryption_key: kms.IKey,
        retention_days: int,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.DESTROY,
    ) -> None:
        super().__init__(scope, id_)
        self.log_group = logs.LogGroup(
            self,
            "LogGroup",
            log_group_name=log_group_name,
            encryption_key=encryption_key,
            removal_policy=removal_policy,
        )
        # RetentionDays is a name-valued enum; the settings hold days, validated against the allowed values.
        cfn_log_group = self.log_group.node.default_child
        assert isinstance(cfn_log_group, logs.CfnLogGroup)
        cfn_log_group.retention_in_days = retention_days


_LOG_GROUP_NAME_CHARACTERS = re.compile(r"[^A-Za-z0-9_/.#-]")


def give_every_function_a_log_group(stack: cdk.Stack, *, encryption_key: kms.IKey, retention_days: int) -> int:
    """Send every Lambda function of ``stack`` that names no log group of its own (the handlers CDK adds for its
    custom resources: bucket deployments, auto-delete, the default security group's restriction, …) to an encrypted
    log group with ``retention_days``; returns how many it redirected.

    Without this, Lambda creates ``/aws/lambda/<name>`` on first use, outside the stack, unencrypted and never expiring
    (issue 36). ``LoggingConfig.LogGroup`` takes the group's name (its ``Ref``); the handlers' roles already carry
    AWSLambdaBasicExecutionRole, whose logs statements cover any group. Call once the stack holds all its constructs.
    """
    functions: list[cdk.CfnResource] = [
        child
        for child in stack.node.find_all()
        if isinstance(child, cdk.CfnResource)
        and child.cfn_resource_type == "AWS::Lambda::Function"
        and cdk.Stack.of(child) is stack
        and not _names_a_log_group(child)
    ]
    for function in functions:
        path = function.node.path.removeprefix(stack.node.path + "/")
        scope = function.node.scope
        assert isinstance(scope, Construct)
        group = EncryptedLogGroup(
            scope,
            f"{function.node.id}Logs",
            log_group_name=_LOG_GROUP_NAME_CHARACTERS.sub("-", f"/{stack.stack_name}/functions/{path}"),
            encryption_key=encryption_key,
            retention_days=retention_days,
        ).log_group
        if isinstance(function, lambda_.CfnFunction):
            function.logging_config = lambda_.CfnFunction.LoggingConfigProperty(log_group=group.log_group_name)
        else:  # a CustomResourceProvider's handler: a plain CfnResource
            function.add_property_override("LoggingConfig.LogGroup", group.log_group_name)
        function.node.add_dependency(group)
    return len(functions)


def _names_a_log_group(function: cdk.CfnResource) -> bool:
    if isinstance(function, lambda_.CfnFunction):
        config = function.logging_config
        return config is not None and getattr(config, "log_group", None) is not None
    # A plain CfnResource's properties as given (the override above is not among them, so a second call would add
    # another group: it is called once per stack).
    properties = cdk.Stack.of(function).resolve(function._cfn_properties)
    return bool(properties.get("LoggingConfig", {}).get("LogGroup"))
