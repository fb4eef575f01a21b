"""The serverless backend's stack side (``mtrl.backends.serverless``): what its adapter may do from the backend
function (jobs, the preflight reads, the agent smoke test), the job and agent roles of the backends stack, and the
deploy-time values it reads (``ServerlessSettings``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mtrl.backends.serverless.settings import ServerlessSettings
from stacks.backends.contract import StackInputs
from stacks.backends.permissions import (
    JOB_SAGEMAKER,
    SAGEMAKER,
    BackendFunctionPolicy,
    PolicyParts,
    arn_and_where,
)
from stacks.nag import acknowledge


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


# -- the roles of the backends stack (BackendRoles composes them) ---------------------------------------------


def serverless_job_role(
    scope: Construct,
    *,
    prefix: str,
    data_bucket: s3.IBucket,
    data_key: kms.IKey,
    mlflow_arn: str,
    agent_runtime_arns: Sequence[str],
    wildcard_reasons: dict[str, str],
) -> iam.Role:
    """Exactly the documented job policy's actions (``serverless_job_policy.json``, source named there), each
    scoped to this deployment: the run prefixes, its agents, its package groups and MLflow app, the job logs."""
    # Both sts:AssumeRole and sts:TagSession, or the job fails with "Could not assume role".
    stack = cdk.Stack.of(scope)
    role = iam.Role(
        scope,
        "ServerlessJobRole",
        role_name=f"{prefix}-serverless-job",
        description=f"{prefix}: SageMaker AI serverless MTRL jobs (AgentRFT, AgentRFTEvaluation)",
        assumed_by=iam.ServicePrincipal(JOB_SAGEMAKER).with_session_tags(),
    )
    arn = f"arn:{stack.partition}"
    where = f"{stack.region}:{stack.account}"
    job_logs = f"{arn}:logs:{where}:log-group:/aws/sagemaker/Job*"
    statements = [
        iam.PolicyStatement(
            sid="ReadRunInput",  # the converted train/validation/evaluation channels
            actions=["s3:GetObject"],
            resources=[data_bucket.arn_for_objects("runs/*/input/*")],
        ),
        iam.PolicyStatement(
            sid="ListRunInput",  # S3Prefix channels are listed; the service checks the bucket's region
            actions=["s3:ListBucket", "s3:GetBucketLocation"],
            resources=[data_bucket.bucket_arn],
        ),
        iam.PolicyStatement(
            sid="WriteRunOutput",
            actions=["s3:PutObject", "s3:AbortMultipartUpload"],
            resources=[
                data_bucket.arn_for_objects("runs/*/model/*"),
                data_bucket.arn_for_objects("runs/*/evaluation/*"),
            ],
        ),
        iam.PolicyStatement(
            sid="DataKey",
            actions=["kms:Decrypt", "kms:GenerateDataKey", "kms:DescribeKey"],
            resources=[data_key.key_arn],
        ),
        iam.PolicyStatement(
            sid="InvokeTheRunAgent",
            actions=["lambda:InvokeFunction"],
            resources=[f"{arn}:lambda:{where}:function:{prefix}-agent-*"],
        ),
        iam.PolicyStatement(
            sid="BaseModel",  # TrainingConfig/EvaluationConfig.BaseModelArn: the public hub's model content
            actions=["sagemaker:DescribeHubContent"],
            resources=[f"{arn}:sagemaker:{stack.region}:aws:hub-content/SageMakerPublicHub/Model/*"],
        ),
        iam.PolicyStatement(
            sid="ModelPackages",  # output + checkpoint packages; the trained package an evaluation reads
            actions=[
                "sagemaker:CreateModelPackage",
                "sagemaker:DescribeModelPackage",
                "sagemaker:DescribeModelPackageGroup",
                "sagemaker:AccessModelPackage",
            ],
            resources=[
                f"{arn}:sagemaker:{where}:model-package-group/{prefix}-*",
                f"{arn}:sagemaker:{where}:model-package/{prefix}-*/*",
            ],
        ),
        iam.PolicyStatement(
            sid="MlflowApp",
            actions=["sagemaker:DescribeMlflowApp", "sagemaker:CallMlflowAppApi"],
            resources=[mlflow_arn],
        ),
        iam.PolicyStatement(
            sid="JobLogs",  # /aws/sagemaker/Job/AgentRFT, …/AgentRFTEvaluation and their streams
            actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
            resources=[job_logs, f"{job_logs}:log-stream:*"],
        ),
    ]
    if agent_runtime_arns:  # only the runtimes the operator listed (issue 20 item 6), any endpoint of each
        statements.append(
            iam.PolicyStatement(
                sid="InvokeTheRunAgentRuntime",
                actions=["bedrock-agentcore:InvokeAgentRuntime", "bedrock-agentcore:GetAgentRuntime"],
                resources=agent_runtime_resources(agent_runtime_arns),
            )
        )
    for statement in statements:
        role.add_to_policy(statement)
    wildcard_reasons[role.node.id] = (
        "Wildcards are per-run object prefixes (runs/*/input|model|evaluation/*), the deployment's agent "
        "functions and model package groups (<prefix>-*), the endpoints of the listed AgentCore runtimes "
        "(runtime/<id>/runtime-endpoint/*: a run chooses the qualifier), the public hub's model content (the run "
        "chooses the base model) and the service's job log groups (/aws/sagemaker/Job*, one per job category) "
        "and their streams."
    )
    return role


def agent_role(scope: Construct, *, prefix: str) -> iam.Role:
    """The rollout agent's role (Lambda or AgentCore), which serverless jobs call."""
    role = iam.Role(
        scope,
        "AgentRole",
        role_name=f"{prefix}-agent",
        description=f"{prefix}: the rollout agent (Lambda or AgentCore) serverless jobs call",
        assumed_by=iam.CompositePrincipal(
            iam.ServicePrincipal("bedrock-agentcore.amazonaws.com"),
            iam.ServicePrincipal("lambda.amazonaws.com"),
        ),
        managed_policies=[
            # sagemaker:Sample/CompleteRollout/UpdateReward/CallWithBearerToken; without it every rollout is
            # AccessDenied (the Wordle sample's AgentCore IAM). Job ARNs are per run: nothing narrower to name.
            iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSageMakerJobRuntimeAccess"),
            iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AWSLambdaBasicExecutionRole"),
        ],
    )
    for name, reason in (
        (
            "AmazonSageMakerJobRuntimeAccess",
            "the documented grant for the job-runtime operations (job ARNs are per run).",
        ),
        ("service-role/AWSLambdaBasicExecutionRole", "writes only the agent function's own logs."),
    ):
        acknowledge(
            role, f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{name}]", f"{name}: {reason}"
        )
    return role


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
