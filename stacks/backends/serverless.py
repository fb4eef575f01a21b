"""The serverless backend's stack side (``mtrl.backends.serverless``): what its adapter may do from the backend
function (jobs, the preflight reads, the agent smoke test) and the deploy-time values it reads
(``ServerlessSettings``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_iam as iam

from mtrl.backends.serverless.settings import ServerlessSettings
from stacks.backends.contract import StackInputs
from stacks.backends.permissions import (
    JOB_SAGEMAKER,
    SAGEMAKER,
    BackendFunctionPolicy,
    PolicyParts,
    arn_and_where,
)


@dataclass(frozen=True)
class ServerlessTargets:
    job_role_arn: str
    agent_function_arns: list[str]  # one per enabled environment
    mlflow_app_arn: str
    model_package_group_arn: str
    data_bucket_arn: str
    # The AgentCore runtimes runs may call: the deployment's own and those manifests may name (none: no statement).
    agent_runtime_arns: tuple[str, ...] = ()

    @classmethod
    def of(cls, inputs: StackInputs) -> ServerlessTargets:
        backends = inputs.backends
        return cls(
            job_role_arn=backends.roles.serverless_job_role.role_arn,
            agent_function_arns=[agent.function.function_arn for agent in backends.agents.values()],
            agent_runtime_arns=tuple(inputs.settings.usable_agent_runtime_arns),
            mlflow_app_arn=backends.mlflow_app_arn,
            model_package_group_arn=backends.model_package_group_arn,
            data_bucket_arn=inputs.data_bucket.bucket_arn,
        )


def agent_runtime_resources(runtime_arns: Sequence[str]) -> list[str]:
    """IAM resources for invoking the listed AgentCore runtimes: each runtime and any of its endpoints."""
    return [resource for arn in runtime_arns for resource in (arn, f"{arn}/runtime-endpoint/*")]


def agent_runtime_log_group(runtime_arn: str) -> str:
    """The log groups of a runtime's endpoints: /aws/bedrock-agentcore/runtimes/<runtime id>-<qualifier>."""
    region, account, resource = runtime_arn.split(":")[3:6]
    partition = runtime_arn.split(":")[1]
    runtime_id = resource.removeprefix("runtime/")
    return f"arn:{partition}:logs:{region}:{account}:log-group:/aws/bedrock-agentcore/runtimes/{runtime_id}-*"


def _wildcard_reasons(arn: str, where: str, serverless: ServerlessTargets) -> dict[str, str]:
    reasons = {
        f"{arn}:sagemaker:{where}:job/*/mtrl-*": "Serverless job names are derived from run ids (mtrl-<run>, "
        "mtrl-eval-<run>, the baseline mtrl-base-<run>) in either job category.",
    }
    for runtime_arn in serverless.agent_runtime_arns:
        reasons[f"{runtime_arn}/runtime-endpoint/*"] = (
            "Any endpoint (qualifier) of a runtime the operator listed; smoke test only."
        )
        reasons[agent_runtime_log_group(runtime_arn)] = (
            "The smoke test reads the listed runtime's log group (/aws/bedrock-agentcore/runtimes/<runtime "
            "id>-<qualifier>) for the job runtime's answer."
        )
    return reasons


def serverless_statements(stack: cdk.Stack, serverless: ServerlessTargets) -> PolicyParts:
    """The statements of the serverless adapter's calls, with why each wildcard resource cannot be narrower."""
    arn, where = arn_and_where(stack)
    statements = [
        iam.PolicyStatement(
            sid="ServerlessJobs",  # CreateJob (with Tags), DescribeJob, StopJob
            actions=["sagemaker:CreateJob", "sagemaker:DescribeJob", "sagemaker:StopJob", "sagemaker:AddTags"],
            resources=[f"{arn}:sagemaker:{where}:job/*/mtrl-*"],
        ),
        iam.PolicyStatement(
            sid="PassJobRoleToSageMaker",  # CreateJob(RoleArn=…)
            actions=["iam:PassRole"],
            resources=[serverless.job_role_arn],
            # The job role is assumed by job.sagemaker.amazonaws.com; which of the two principals CreateJob
            # reports as the pass target is not documented, so both (and only they) are allowed.
            conditions={"StringEquals": {"iam:PassedToService": [SAGEMAKER, JOB_SAGEMAKER]}},
        ),
        iam.PolicyStatement(
            sid="ServerlessPreflightJobRoleTrust",  # GetRole: trusts job.sagemaker.amazonaws.com + TagSession?
            actions=["iam:GetRole"],
            resources=[serverless.job_role_arn],
        ),
        iam.PolicyStatement(
            sid="ServerlessPreflightMlflow",  # DescribeMlflowApp
            actions=["sagemaker:DescribeMlflowApp"],
            resources=[serverless.mlflow_app_arn],
        ),
        iam.PolicyStatement(
            sid="ServerlessPreflightModelPackages",  # DescribeModelPackageGroup
            actions=["sagemaker:DescribeModelPackageGroup"],
            resources=[serverless.model_package_group_arn],
        ),
        iam.PolicyStatement(
            sid="ServerlessPreflightBucketRegion",  # GetBucketLocation
            actions=["s3:GetBucketLocation"],
            resources=[serverless.data_bucket_arn],
        ),
        iam.PolicyStatement(
            sid="ServerlessAgentSmokeTest",  # Invoke with a fake job ARN of this account
            actions=["lambda:InvokeFunction"],
            resources=list(serverless.agent_function_arns),
        ),
    ]
    if serverless.agent_runtime_arns:  # only the listed runtimes (issue 20 item 6)
        statements += [
            iam.PolicyStatement(
                sid="ServerlessAgentCoreSmokeTest",  # InvokeAgentRuntime with a fake job ARN of this account
                actions=["bedrock-agentcore:InvokeAgentRuntime"],
                resources=agent_runtime_resources(serverless.agent_runtime_arns),
            ),
            iam.PolicyStatement(
                sid="ServerlessAgentCoreSmokeTestLogs",  # FilterLogEvents: the runtime's answer to the agent
                actions=["logs:FilterLogEvents"],
                resources=[agent_runtime_log_group(runtime) for runtime in serverless.agent_runtime_arns],
            ),
        ]
    return statements, _wildcard_reasons(arn, where, serverless)


class ServerlessStackSide:
    """SageMaker AI serverless MTRL jobs: the jobs, the preflight reads of their role, MLflow app, model package
    group and bucket region, and the smoke test of the run's agent."""

    def add_to_pipeline(self, inputs: StackInputs) -> None:
        statements, reasons = serverless_statements(cdk.Stack.of(inputs.scope), ServerlessTargets.of(inputs))
        BackendFunctionPolicy(
            inputs.scope,
            "BackendPermissionsServerless",
            role=inputs.function_role,
            statements=statements,
            wildcard_reasons=reasons,
        )

    def pipeline_values(self, inputs: StackInputs) -> ServerlessSettings:
        settings = inputs.settings
        backends = inputs.backends
        return ServerlessSettings.model_construct(
            region=inputs.region,
            kms_key_arn=inputs.data_key.key_arn,
            serverless_job_role_arn=backends.roles.serverless_job_role.role_arn,
            serverless_agent_lambda_arns=[
                f"{env_id}={agent.function.function_arn}" for env_id, agent in backends.agents.items()
            ],
            serverless_mlflow_app_arn=backends.mlflow_app_arn,
            serverless_model_package_group_arn=backends.model_package_group_arn,
            serverless_base_model=settings.serverless_base_model,
            serverless_accept_eula=settings.serverless_accept_eula,
            serverless_agent_runtime_arn=settings.serverless_agent_runtime_arn,  # None: no AgentCore runtime
        )
