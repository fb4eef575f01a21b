"""The hyperpod backend's roles in the backends stack: the Nova Forge runner task's and the RFT role (the SDK's
per-run infrastructure: its SAM deploy task, proxy and rollout functions).

Nothing here may write IAM at run time except, opt-in, what the Nova Forge SDK's SAM template forces (see
``allow_sam_role_creation``). The customer-managed policy ``<rft_role_name>Policy`` is created here and attached to
the runner role and the RFT role, so the SDK's ``ensure_rft_policy_on_current_role`` finds it and never calls
``iam:CreatePolicy``/``iam:AttachRolePolicy`` (amzn-nova-forge 1.4.10's RFT infrastructure).
"""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mtrl.backends.hyperpod.naming import run_name_pattern
from mtrl.envs.nova_package import S3_PREFIX as NOVA_ENV_PREFIX

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


@dataclass(frozen=True)
class NovaForgeRoles:
    rft_role: iam.Role
    runner_role: iam.Role
    rft_policy: iam.ManagedPolicy


def nova_forge_roles(
    scope: Construct,
    *,
    prefix: str,
    rft_role_name: str,
    data_bucket: s3.IBucket,
    data_key: kms.IKey,
    reward_cluster_arn: str,
    hyperpod_cluster_arn: str,
    eks_cluster_arn: str,
    allow_sam_role_creation: bool,
    wildcard_reasons: dict[str, str],
) -> NovaForgeRoles:
    """The RFT role, the runner role and the RFT policy both carry; why each one's wildcards cannot be narrower goes
    into ``wildcard_reasons`` (construct id → reason)."""
    stack = cdk.Stack.of(scope)
    run_scoped = run_name_pattern(prefix)  # every per-run Nova Forge name: <stem>-nf<hash>…
    rft_role = iam.Role(
        scope,
        "RftRole",
        role_name=rft_role_name,
        description=f"{prefix}: Nova Forge per-run infrastructure (SAM deploy task, proxy/rollout functions)",
        assumed_by=iam.CompositePrincipal(
            iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
            iam.ServicePrincipal("lambda.amazonaws.com"),
            iam.ServicePrincipal("sagemaker.amazonaws.com"),
        ),
    )
    runner_role = iam.Role(
        scope,
        "NovaRunnerRole",
        role_name=f"{prefix}-nova-runner",
        description=f"{prefix}: the Nova Forge runner task (SDK setup/submit); no IAM write access",
        assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
    )
    rft_policy = _rft_policy(
        scope, prefix=prefix, rft_role_name=rft_role_name, run_scoped=run_scoped, wildcard_reasons=wildcard_reasons
    )
    rft_policy.attach_to_role(rft_role)
    rft_policy.attach_to_role(runner_role)
    _runner_permissions(
        runner_role,
        rft_role=rft_role,
        wildcard_reasons=wildcard_reasons,
        stack=stack,
        run_scoped=run_scoped,
        data_bucket=data_bucket,
        data_key=data_key,
        reward_cluster_arn=reward_cluster_arn,
        hyperpod_cluster_arn=hyperpod_cluster_arn,
        eks_cluster_arn=eks_cluster_arn,
    )
    # The SDK's per-run infrastructure and training job read the run's inputs and write its outputs under runs/; they
    # delete nothing there (the run's folder is kept as its record).
    run_objects(rft_role, data_bucket, read=("runs/",), write=("runs/",))
    data_key.grant_encrypt_decrypt(rft_role)  # includes kms:Decrypt, which S3 calls for SSE-KMS reads
    # The SDK's environment tasks run with the RFT role as task role (ECSRFTInfrastructure.get_or_create_ecs_roles)
    # and install a CustomEnvironment with `aws s3 cp <s3_uri>` (CommonInfraCommands._build_setup_commands): the
    # environment packages (stacks/constructs/nova_env_packages.py), read-only, nothing else under nova-envs/.
    rft_role.add_to_policy(
        iam.PolicyStatement(
            sid="ReadEnvironmentPackages",
            actions=["s3:GetObject"],
            resources=[data_bucket.arn_for_objects(f"{NOVA_ENV_PREFIX}/*")],
        )
    )
    if allow_sam_role_creation:
        _sam_role_creation(rft_role, stack, run_scoped)
    wildcard_reasons.setdefault(
        rft_role.node.id,
        "Objects under the run prefix runs/* of the data bucket (get/put, no delete) and the "
        "data key's GenerateDataKey*/ReEncrypt*; s3:GetObject of the content-addressed environment packages "
        "nova-envs/*; with allow_sam_role_creation, roles named <stem>-nf*.",
    )
    return NovaForgeRoles(rft_role=rft_role, runner_role=runner_role, rft_policy=rft_policy)


def _rft_policy(
    scope: Construct, *, prefix: str, rft_role_name: str, run_scoped: str, wildcard_reasons: dict[str, str]
) -> iam.ManagedPolicy:
    """What the SDK and its per-run stack need, limited to ``<stem>-nf*`` resources."""
    stack = cdk.Stack.of(scope)
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
        scope,
        "RftPolicy",
        # Exactly this name: the SDK looks for arn:…:policy/<rft_role_name>Policy on its caller.
        managed_policy_name=f"{rft_role_name}Policy",
        description=f"{prefix}: Nova Forge per-run resources (<stem>-nf*) only",
        statements=statements,
    )
    wildcard_reasons[policy.node.id] = (
        "Every wildcard is the per-run name pattern <stem>-nf* (stacks, queues, functions, tables, log "
        "groups), SAM's own managed artifacts stack/bucket, or the Nova Forge starter-kit/recipe buckets whose "
        "account-suffixed names the SDK derives at run time."
    )
    return policy


def run_objects(role: iam.Role, bucket: s3.IBucket, *, read: tuple[str, ...], write: tuple[str, ...]) -> None:
    """Object reads under ``read`` and writes under ``write`` (multipart uploads included), and listing only those
    prefixes (``s3:prefix``): never ``s3:List*`` on the whole bucket nor any delete, which CDK's ``grant_read_write``
    gives (issue 36)."""
    role.add_to_policy(
        iam.PolicyStatement(
            sid="ReadRunObjects",
            actions=["s3:GetObject"],
            resources=[bucket.arn_for_objects(f"{prefix}*") for prefix in read],
        )
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="WriteRunObjects",
            actions=["s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
            resources=[bucket.arn_for_objects(f"{prefix}*") for prefix in write],
        )
    )
    # A listing must name one of those prefixes. IfExists: HeadBucket, which the Nova Forge SDK calls on the data
    # bucket (its output location; seen in tests/contract/test_nova_runner_contract.py), is authorized as s3:ListBucket
    # with no s3:prefix at all. IAM cannot tell it from a listing without a prefix, so that one stays possible: it shows
    # key names, never an object outside the prefixes above.
    role.add_to_policy(
        iam.PolicyStatement(
            sid="ListRunPrefixes",
            actions=["s3:ListBucket"],
            resources=[bucket.bucket_arn],
            conditions={"StringLikeIfExists": {"s3:prefix": sorted({f"{p}*" for p in (*read, *write)})}},
        )
    )


def _runner_permissions(
    role: iam.Role,
    *,
    rft_role: iam.Role,
    wildcard_reasons: dict[str, str],
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
    # The runner reads its spec and the run's rows and writes each command's result (nova_runner.py): no delete.
    run_objects(role, data_bucket, read=("training-data/", "runs/"), write=("runs/",))
    data_key.grant_encrypt_decrypt(role)
    role.add_to_policy(
        iam.PolicyStatement(
            sid="SdkRoleChecks",  # _ensure_rft_role_exists and the attached-policy check; read-only
            actions=["iam:GetRole", "iam:ListAttachedRolePolicies"],
            resources=[rft_role.role_arn, role.role_arn],
        )
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="PassRftRoleToItsTasksAndFunctions",
            actions=["iam:PassRole"],
            resources=[rft_role.role_arn],
            conditions={"StringEquals": {"iam:PassedToService": ["ecs-tasks.amazonaws.com", "lambda.amazonaws.com"]}},
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
    wildcard_reasons[role.node.id] = (
        "Wildcards: the run's own S3 prefixes (training-data/*, runs/*); JumpStart's recipe templates "
        "(jumpstart-cache-prod-<region>/recipes/*, read-only); per-run task definitions "
        "(<stem>-nf*) on the reward cluster only; task status actions conditioned on that cluster; "
        "RegisterTaskDefinition/DescribeTaskDefinition/DescribeClusters/ListStacks/Describe VPCs+subnets, which "
        "have no resource-level permissions; the public SageMaker hub's recipe metadata."
    )


def _sam_role_creation(rft_role: iam.Role, stack: cdk.Stack, run_scoped: str) -> None:
    arn = f"arn:{stack.partition}"
    roles = f"{arn}:iam::{stack.account}:role/{run_scoped}"
    rft_role.add_to_policy(
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
    rft_role.add_to_policy(
        iam.PolicyStatement(
            sid="PassSamTemplateRolesToFunctions",
            actions=["iam:PassRole"],
            resources=[roles],
            conditions={"StringEquals": {"iam:PassedToService": "lambda.amazonaws.com"}},
        )
    )
