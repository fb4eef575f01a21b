"""IAM for the training backends: the serverless job and agent roles, the Nova Forge runner role and the RFT role.

Nothing here may write IAM at run time except, opt-in, what the Nova Forge SDK's SAM template forces (see
``allow_sam_role_creation``). The customer-managed policy ``<rft_role_name>Policy`` is created here and attached to
the runner role and the RFT role, so the SDK's ``ensure_rft_policy_on_current_role`` finds it and never calls
``iam:CreatePolicy``/``iam:AttachRolePolicy`` (amzn-nova-forge 1.4.10's RFT infrastructure).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mtrl.backends.hyperpod.naming import run_name_pattern
from mtrl.envs.nova_package import S3_PREFIX as NOVA_ENV_PREFIX
from stacks.backends.serverless import agent_runtime_resources
from stacks.nag import acknowledge, nag_resource

JOB_PRINCIPAL = "job.sagemaker.amazonaws.com"
# The SAM CLI keeps its artifacts bucket in this stack; the SDK's `sam deploy` creates/uses it.
SAM_MANAGED_STACK = "aws-sam-cli-managed-default"
# The subscription-gated starter kit and recipes the SDK reads (its RFT infrastructure and HyperPod submission).
NOVA_BUCKET_PATTERNS = ("nova-rft-starter-kit-*", "nova-forge-*")

# What the SDK's per-run stack (<stem>-nf*) does with each family of its resources (the RFT policy).
# The stack itself, deployed by `sam deploy` through change sets.
PER_RUN_STACK_ACTIONS = (
    "cloudformation:CreateStack",
    "cloudformation:UpdateStack",
    "cloudformation:DeleteStack",
    "cloudformation:DescribeStacks",
    "cloudformation:DescribeStackEvents",
    "cloudformation:DescribeStackResources",
    "cloudformation:GetTemplate",
    "cloudformation:CreateChangeSet",
    "cloudformation:DescribeChangeSet",
    "cloudformation:ExecuteChangeSet",
    "cloudformation:DeleteChangeSet",
)
# The rollout request and result queues.
PER_RUN_QUEUE_ACTIONS = (
    "sqs:CreateQueue",
    "sqs:DeleteQueue",
    "sqs:GetQueueAttributes",
    "sqs:SetQueueAttributes",
    "sqs:GetQueueUrl",
    "sqs:SendMessage",
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:PurgeQueue",
    "sqs:TagQueue",
)
# The proxy and rollout functions, their URLs and their queue triggers.
PER_RUN_FUNCTION_ACTIONS = (
    "lambda:CreateFunction",
    "lambda:DeleteFunction",
    "lambda:GetFunction",
    "lambda:GetFunctionConfiguration",
    "lambda:UpdateFunctionConfiguration",
    "lambda:UpdateFunctionCode",
    "lambda:InvokeFunction",
    "lambda:InvokeFunctionUrl",
    "lambda:AddPermission",
    "lambda:RemovePermission",
    "lambda:CreateFunctionUrlConfig",
    "lambda:UpdateFunctionUrlConfig",
    "lambda:DeleteFunctionUrlConfig",
    "lambda:GetFunctionUrlConfig",
    "lambda:CreateEventSourceMapping",
    "lambda:DeleteEventSourceMapping",
    "lambda:GetEventSourceMapping",
    "lambda:TagResource",
)
# The run's state table.
PER_RUN_TABLE_ACTIONS = (
    "dynamodb:CreateTable",
    "dynamodb:DeleteTable",
    "dynamodb:DescribeTable",
    "dynamodb:PutItem",
    "dynamodb:GetItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:Query",
    "dynamodb:TagResource",
)


class BackendRoles(Construct):
    """Attributes: ``serverless_job_role``, ``agent_role``, ``runner_role``, ``rft_role``, ``rft_policy``.

    Props:
    - ``prefix``: the deployment prefix; per-run stacks, queues, functions and tables are ``<stem>-nf*``.
    - ``data_bucket`` / ``data_key``: where runs read and write (``runs/<run-id>/…``) and the key that encrypts it.
    - ``reward_cluster_arn``: the ECS cluster the runner starts tasks on.
    - ``hyperpod_cluster_arn`` / ``eks_cluster_arn``: what ``hyperpod connect-cluster`` reads.
    - ``mlflow_arn``: the MLflow app (serverless jobs) or tracking server (Nova Forge).
    - ``agent_runtime_arns``: the AgentCore runtimes serverless jobs may call (none: no AgentCore statement).
    - ``rft_role_name``: defaults to ``<prefix>-rft``; the policy is ``<rft_role_name>Policy`` exactly.
    - ``allow_sam_role_creation``: the SDK deploys its SAM template with ``CAPABILITY_IAM``, so whoever runs
      ``sam deploy`` (the RFT role, in the SDK's ECS task) must create the template's Lambda roles. Off by default:
      turning it on grants role creation limited to ``role/<stem>-nf*``.
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        prefix: str,
        data_bucket: s3.IBucket,
        data_key: kms.IKey,
        reward_cluster_arn: str,
        hyperpod_cluster_arn: str,
        eks_cluster_arn: str,
        mlflow_arn: str,
        agent_runtime_arns: Sequence[str] = (),
        rft_role_name: str | None = None,
        allow_sam_role_creation: bool = False,
    ) -> None:
        super().__init__(scope, id_)
        stack = cdk.Stack.of(self)
        self.prefix = prefix
        # Why each policy's wildcards cannot be narrower; acknowledged finding by finding at the end.
        self._wildcard_reasons: dict[str, str] = {}
        self.rft_role_name = rft_role_name or f"{prefix}-rft"
        run_scoped = run_name_pattern(prefix)  # every per-run Nova Forge name: <stem>-nf<hash>…

        self.agent_runtime_arns = list(agent_runtime_arns)
        self.serverless_job_role = self._serverless_job_role(stack, data_bucket, data_key, mlflow_arn)
        self.agent_role = self._agent_role()

        self.rft_role = iam.Role(
            self,
            "RftRole",
            role_name=self.rft_role_name,
            description=f"{prefix}: Nova Forge per-run infrastructure (SAM deploy task, proxy/rollout functions)",
            assumed_by=iam.CompositePrincipal(
                iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
                iam.ServicePrincipal("lambda.amazonaws.com"),
                iam.ServicePrincipal("sagemaker.amazonaws.com"),
            ),
        )
        self.runner_role = iam.Role(
            self,
            "NovaRunnerRole",
            role_name=f"{prefix}-nova-runner",
            description=f"{prefix}: the Nova Forge runner task (SDK setup/submit); no IAM write access",
            assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
        )
        self.rft_policy = self._rft_policy(stack, run_scoped)
        self.rft_policy.attach_to_role(self.rft_role)
        self.rft_policy.attach_to_role(self.runner_role)
        self._runner_permissions(
            stack=stack,
            run_scoped=run_scoped,
            data_bucket=data_bucket,
            data_key=data_key,
            reward_cluster_arn=reward_cluster_arn,
            hyperpod_cluster_arn=hyperpod_cluster_arn,
            eks_cluster_arn=eks_cluster_arn,
        )
        data_bucket.grant_read_write(self.rft_role, "runs/*")
        data_key.grant_encrypt_decrypt(self.rft_role)  # includes kms:Decrypt, which S3 calls for SSE-KMS reads
        # The SDK's environment tasks run with the RFT role as task role (ECSRFTInfrastructure.get_or_create_ecs_roles)
        # and install a CustomEnvironment with `aws s3 cp <s3_uri>` (CommonInfraCommands._build_setup_commands): the
        # environment packages (stacks/constructs/nova_env_packages.py), read-only, nothing else under nova-envs/.
        self.rft_role.add_to_policy(
            iam.PolicyStatement(
                sid="ReadEnvironmentPackages",
                actions=["s3:GetObject"],
                resources=[data_bucket.arn_for_objects(f"{NOVA_ENV_PREFIX}/*")],
            )
        )
        if allow_sam_role_creation:
            self._sam_role_creation(stack, run_scoped)
        self._wildcard_reasons.setdefault(
            self.rft_role.node.id,
            "CDK grants for the run prefix runs/* of the data bucket (object-level s3:*Object* actions) and the "
            "data key's GenerateDataKey*/ReEncrypt*; s3:GetObject of the content-addressed environment packages "
            "nova-envs/*; with allow_sam_role_creation, roles named <stem>-nf*.",
        )
        self._acknowledge_wildcards()

    # -- serverless --------------------------------------------------------------------------------------------

    def _serverless_job_role(
        self, stack: cdk.Stack, data_bucket: s3.IBucket, data_key: kms.IKey, mlflow_arn: str
    ) -> iam.Role:
        """Exactly the documented job policy's actions (``serverless_job_policy.json``, source named there), each
        scoped to this deployment: the run prefixes, its agents, its package groups and MLflow app, the job logs."""
        # Both sts:AssumeRole and sts:TagSession, or the job fails with "Could not assume role".
        role = iam.Role(
            self,
            "ServerlessJobRole",
            role_name=f"{self.prefix}-serverless-job",
            description=f"{self.prefix}: SageMaker AI serverless MTRL jobs (AgentRFT, AgentRFTEvaluation)",
            assumed_by=iam.ServicePrincipal(JOB_PRINCIPAL).with_session_tags(),
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
                resources=[f"{arn}:lambda:{where}:function:{self.prefix}-agent-*"],
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
                    f"{arn}:sagemaker:{where}:model-package-group/{self.prefix}-*",
                    f"{arn}:sagemaker:{where}:model-package/{self.prefix}-*/*",
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
        if self.agent_runtime_arns:  # only the runtimes the operator listed (issue 20 item 6), any endpoint of each
            statements.append(
                iam.PolicyStatement(
                    sid="InvokeTheRunAgentRuntime",
                    actions=["bedrock-agentcore:InvokeAgentRuntime", "bedrock-agentcore:GetAgentRuntime"],
                    resources=agent_runtime_resources(self.agent_runtime_arns),
                )
            )
        for statement in statements:
            role.add_to_policy(statement)
        self._wildcard_reasons[role.node.id] = (
            "Wildcards are per-run object prefixes (runs/*/input|model|evaluation/*), the deployment's agent "
            "functions and model package groups (<prefix>-*), the endpoints of the listed AgentCore runtimes "
            "(runtime/<id>/runtime-endpoint/*: a run chooses the qualifier), the public hub's model content (the run "
            "chooses the base model) and the service's job log groups (/aws/sagemaker/Job*, one per job category) "
            "and their streams."
        )
        return role

    def _agent_role(self) -> iam.Role:
        role = iam.Role(
            self,
            "AgentRole",
            role_name=f"{self.prefix}-agent",
            description=f"{self.prefix}: the rollout agent (Lambda or AgentCore) serverless jobs call",
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

    # -- Nova Forge --------------------------------------------------------------------------------------------

    def _rft_policy(self, stack: cdk.Stack, run_scoped: str) -> iam.ManagedPolicy:
        """What the SDK and its per-run stack need, limited to ``<stem>-nf*`` resources."""
        arn = f"arn:{stack.partition}"
        where = f"{stack.region}:{stack.account}"
        statements = [
            iam.PolicyStatement(
                sid="PerRunStacks",
                actions=list(PER_RUN_STACK_ACTIONS),
                resources=[
                    f"{arn}:cloudformation:{where}:stack/{run_scoped}/*",
                    f"{arn}:cloudformation:{where}:stack/{SAM_MANAGED_STACK}/*",
                    f"{arn}:cloudformation:{stack.region}:aws:transform/Serverless-2016-10-31",
                ],
            ),
            iam.PolicyStatement(
                sid="PerRunQueues", actions=list(PER_RUN_QUEUE_ACTIONS), resources=[f"{arn}:sqs:{where}:{run_scoped}"]
            ),
            iam.PolicyStatement(
                sid="PerRunFunctions",
                actions=list(PER_RUN_FUNCTION_ACTIONS),
                resources=[f"{arn}:lambda:{where}:function:{run_scoped}"],
            ),
            iam.PolicyStatement(
                sid="PerRunTables",
                actions=list(PER_RUN_TABLE_ACTIONS),
                resources=[f"{arn}:dynamodb:{where}:table/{run_scoped}"],
            ),
            iam.PolicyStatement(
                sid="PerRunLogs",
                actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:GetLogEvents"],
                # Both forms: the Service Authorization Reference names a log group log-group:<name> (CreateLogGroup,
                # the SDK's /ecs/<base>-NovaForgeSDK), while its streams' actions are checked on log-group:<name>:*.
                resources=[
                    f"{arn}:logs:{where}:log-group:/aws/lambda/{run_scoped}",
                    f"{arn}:logs:{where}:log-group:/aws/lambda/{run_scoped}:*",
                    f"{arn}:logs:{where}:log-group:/ecs/{run_scoped}",
                    f"{arn}:logs:{where}:log-group:/ecs/{run_scoped}:*",
                ],
            ),
            iam.PolicyStatement(
                sid="StarterKitAndSamArtifacts",  # the starter kit and recipes it reads, SAM's artifacts it writes
                actions=["s3:GetObject", "s3:ListBucket", "s3:PutObject", "s3:GetBucketLocation"],
                resources=[
                    f"{arn}:s3:::aws-sam-cli-managed-default-*",
                    f"{arn}:s3:::aws-sam-cli-managed-default-*/*",
                    *(f"{arn}:s3:::{pattern}" for pattern in NOVA_BUCKET_PATTERNS),
                    *(f"{arn}:s3:::{pattern}/*" for pattern in NOVA_BUCKET_PATTERNS),
                ],
            ),
        ]
        policy = iam.ManagedPolicy(
            self,
            "RftPolicy",
            # Exactly this name: the SDK looks for arn:…:policy/<rft_role_name>Policy on its caller.
            managed_policy_name=f"{self.rft_role_name}Policy",
            description=f"{self.prefix}: Nova Forge per-run resources (<stem>-nf*) only",
            statements=statements,
        )
        self._wildcard_reasons[policy.node.id] = (
            "Every wildcard is the per-run name pattern <stem>-nf* (stacks, queues, functions, tables, log "
            "groups), SAM's own managed artifacts stack/bucket, or the Nova Forge starter-kit/recipe buckets whose "
            "account-suffixed names the SDK derives at run time."
        )
        return policy

    def _runner_permissions(
        self,
        *,
        stack: cdk.Stack,
        run_scoped: str,
        data_bucket: s3.IBucket,
        data_key: kms.IKey,
        reward_cluster_arn: str,
        hyperpod_cluster_arn: str,
        eks_cluster_arn: str,
    ) -> None:
        arn = f"arn:{stack.partition}"
        where = f"{stack.region}:{stack.account}"
        role = self.runner_role
        data_bucket.grant_read(role, "training-data/*")
        data_bucket.grant_read_write(role, "runs/*")
        data_key.grant_encrypt_decrypt(role)
        role.add_to_policy(
            iam.PolicyStatement(
                sid="SdkRoleChecks",  # _ensure_rft_role_exists and the attached-policy check; read-only
                actions=["iam:GetRole", "iam:ListAttachedRolePolicies"],
                resources=[self.rft_role.role_arn, role.role_arn],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="PassRftRoleToItsTasksAndFunctions",
                actions=["iam:PassRole"],
                resources=[self.rft_role.role_arn],
                conditions={
                    "StringEquals": {"iam:PassedToService": ["ecs-tasks.amazonaws.com", "lambda.amazonaws.com"]}
                },
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="SamDeployTask",
                actions=["ecs:RunTask"],
                resources=[f"{arn}:ecs:{where}:task-definition/{run_scoped}:*"],
                conditions={"ArnEquals": {"ecs:cluster": reward_cluster_arn}},
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="SamDeployTaskStatus",
                actions=["ecs:DescribeTasks", "ecs:StopTask", "ecs:ListTasks"],
                resources=["*"],
                conditions={"ArnEquals": {"ecs:cluster": reward_cluster_arn}},
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="SamDeployTaskDefinitions",
                # RegisterTaskDefinition has no resource-level permissions; ListStacks neither.
                actions=[
                    "ecs:RegisterTaskDefinition",
                    "ecs:DescribeTaskDefinition",
                    "ecs:DescribeClusters",
                    "cloudformation:ListStacks",
                    "ec2:DescribeSubnets",
                    "ec2:DescribeVpcs",
                ],
                resources=["*"],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="HyperPodConnect",  # hyperpod connect-cluster / get-job / start-job read the cluster
                actions=["sagemaker:DescribeCluster", "sagemaker:ListClusterNodes", "eks:DescribeCluster"],
                resources=[hyperpod_cluster_arn, eks_cluster_arn],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="RecipeContainerImage",  # the trainer reads the recipe's image from SageMaker Hub metadata
                actions=["sagemaker:DescribeHubContent", "sagemaker:DescribeHub"],
                resources=[
                    f"{arn}:sagemaker:{stack.region}:aws:hub/SageMakerPublicHub",
                    f"{arn}:sagemaker:{stack.region}:aws:hub-content/SageMakerPublicHub/*",
                ],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                # submit: the SDK downloads the recipe templates its DescribeHubContent document names
                # (HpEksPayloadTemplateS3Uri/HpEksOverrideParamsS3Uri, amzn_nova_forge util/recipe.py).
                sid="JumpStartRecipeTemplates",
                actions=["s3:GetObject"],
                resources=[f"{arn}:s3:::jumpstart-cache-prod-{stack.region}/recipes/*"],
            )
        )
        self._wildcard_reasons[role.node.id] = (
            "Wildcards: the run's own S3 prefixes (training-data/*, runs/*); JumpStart's recipe templates "
            "(jumpstart-cache-prod-<region>/recipes/*, read-only); per-run task definitions "
            "(<stem>-nf*) on the reward cluster only; task status actions conditioned on that cluster; "
            "RegisterTaskDefinition/DescribeTaskDefinition/DescribeClusters/ListStacks/Describe VPCs+subnets, which "
            "have no resource-level permissions; the public SageMaker hub's recipe metadata."
        )

    def _sam_role_creation(self, stack: cdk.Stack, run_scoped: str) -> None:
        arn = f"arn:{stack.partition}"
        roles = f"{arn}:iam::{stack.account}:role/{run_scoped}"
        self.rft_role.add_to_policy(
            iam.PolicyStatement(
                sid="SamTemplateRoles",
                actions=[
                    "iam:CreateRole",
                    "iam:DeleteRole",
                    "iam:GetRole",
                    "iam:TagRole",
                    "iam:PutRolePolicy",
                    "iam:DeleteRolePolicy",
                    "iam:AttachRolePolicy",
                    "iam:DetachRolePolicy",
                ],
                resources=[roles],
            )
        )
        self.rft_role.add_to_policy(
            iam.PolicyStatement(
                sid="PassSamTemplateRolesToFunctions",
                actions=["iam:PassRole"],
                resources=[roles],
                conditions={"StringEquals": {"iam:PassedToService": "lambda.amazonaws.com"}},
            )
        )

    def _acknowledge_wildcards(self) -> None:
        """Acknowledge each IAM5 finding (one per wildcard action/resource) with its policy's reason."""
        for owner_id, reason in self._wildcard_reasons.items():
            owner = self.node.find_child(owner_id)
            policy = owner if isinstance(owner, iam.ManagedPolicy) else owner.node.try_find_child("DefaultPolicy")
            if not isinstance(policy, iam.Policy | iam.ManagedPolicy):
                continue
            for statement in policy.document.to_json().get("Statement", []):
                for action in _as_list(statement.get("Action")):
                    if "*" in action:
                        acknowledge(policy, f"AwsSolutions-IAM5[Action::{action}]", reason)
                for resource in _as_list(statement.get("Resource")):
                    if "*" in str(cdk.Stack.of(self).resolve(resource)):
                        acknowledge(policy, f"AwsSolutions-IAM5[Resource::{nag_resource(self, resource)}]", reason)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]
