"""Backends stack: what the ``hyperpod`` and ``serverless`` training backends need besides the cluster and workers.

IAM for both backends (``BackendRoles``), the serverless agent Lambda, its model package group and MLflow app, the
Nova Forge runner's task definition, and the runner's EKS access entry. A stack of its own because these change with
the backends (SDK pins, agent code) and not with the slow cluster stack, and because the runner role (which deploys
per-run CloudFormation stacks) does not belong next to the reward workers, the weakest role in the system.

A backend's parts exist only where the deployment can run it (``DeploySettings.backend_problem``): the Nova Forge
roles, runner, access entry and environment packages with a restricted instance group and the cluster, verl's trainer
identity and builders with the cluster.
"""

from __future__ import annotations

from typing import Any, cast

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from mtrl.backends.verl.config import verl_namespace
from mtrl.envs.registry import list_environments
from mtrl.settings import DeploySettings
from stacks.backends.roles import BackendRoles
from stacks.cluster_stack import ClusterStack
from stacks.constructs.agent_function import AgentFunction
from stacks.constructs.eks_cluster import EDIT_POLICY, JOB_NAMESPACES, VIEW_POLICY
from stacks.constructs.image_builder import ImageBuilder
from stacks.constructs.nova_env_packages import NovaEnvironmentPackages
from stacks.constructs.nova_runner_task import NovaRunnerTask, hyperpod_cli_problem
from stacks.constructs.verl_trainer_identity import VerlTrainerIdentity
from stacks.nag import acknowledge, nag_resource

MLFLOW_PREFIX = "mlflow/"


def enabled_environments(settings: DeploySettings) -> list[tuple[str, bool]]:
    """(environment id, is custom) of every environment a run may use: every built-in one in the registry, plus the
    custom one when enabled. Each gets a serverless agent and a Nova Forge package."""
    environments = [(env_id, False) for env_id, source in list_environments() if source == "builtin"]
    if settings.use_custom_env and settings.custom_env_id and (settings.custom_env_id, False) not in environments:
        environments.append((settings.custom_env_id, True))
    return environments


def _construct_id(env_id: str) -> str:
    return "Agent" + "".join(part.capitalize() for part in env_id.split("_"))


class BackendsStack(cdk.Stack):
    """Attributes: ``roles`` (BackendRoles), ``agents`` (environment id → AgentFunction), ``env_packages``
    (NovaEnvironmentPackages) and ``runner`` (NovaRunnerTask) — both None unless the hyperpod backend is deployed
    (Nova Forge configured, with the cluster) —, ``mlflow_app_arn``, ``model_package_group_arn``."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        settings: DeploySettings,
        data_bucket: s3.IBucket,
        encryption_key: kms.IKey,
        cluster: ClusterStack | None,
        reward_cluster_arn: str,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id_, **kwargs)
        prefix = settings.prefix
        # The bucket through an explicitly named export: wildcard grants on its prefixes then render to a stable id
        # that the acknowledgments can name at construction time (an automatic export would end in a hash).
        export_name = f"{prefix}-data-bucket-arn"
        producer = cdk.Stack.of(data_bucket)
        if producer.node.try_find_child(f"Export{export_name}") is None:  # the pipeline stack may have exported it
            producer.export_value(data_bucket.bucket_arn, name=export_name)
        data_bucket = s3.Bucket.from_bucket_attributes(
            self, "DataBucket", bucket_arn=cdk.Fn.import_value(export_name), encryption_key=encryption_key
        )
        self.mlflow_app_arn = settings.serverless_mlflow_app_arn or self._mlflow_app(
            prefix, data_bucket, encryption_key
        )
        self.model_package_group_arn = self._model_package_group(settings)
        # The hyperpod backend's parts (runner and RFT roles, runner image and task, its EKS access entry, the
        # environment packages) only where the deployment can run it: with the cluster and a restricted instance
        # group (its descriptor's deploy_check; docs/backends.md). Elsewhere its runs are refused at Preflight.
        nova_forge = settings.backend_problem("hyperpod") is None
        hyperpod_arn = (cluster.hyperpod_cluster_arn if cluster else None) or self.format_arn(
            service="sagemaker", resource="cluster", resource_name="*"
        )
        eks_cluster_arn = (
            cluster.eks_cluster_arn
            if cluster
            else self.format_arn(service="eks", resource="cluster", resource_name=f"{prefix}-eks")
        )
        self.roles = BackendRoles(
            self,
            "Roles",
            prefix=prefix,
            data_bucket=data_bucket,
            data_key=encryption_key,
            reward_cluster_arn=reward_cluster_arn,
            hyperpod_cluster_arn=hyperpod_arn,
            eks_cluster_arn=eks_cluster_arn,
            mlflow_arn=self.mlflow_app_arn,
            agent_runtime_arns=settings.usable_agent_runtime_arns,
            allow_sam_role_creation=settings.nova_allow_sam_role_creation,
            nova_forge=nova_forge,
        )
        runner_role = self.roles.runner_role
        if runner_role is not None and (cluster is None or cluster.hyperpod_cluster_arn is None):
            policy = runner_role.node.find_child("DefaultPolicy")
            acknowledge(
                policy,
                f"AwsSolutions-IAM5[Resource::{nag_resource(self, hyperpod_arn)}]",
                "An existing HyperPod cluster's ARN ends in a service-generated id the configuration does not know; "
                "the runner only describes clusters and lists nodes.",
            )
        # One agent per enabled environment: a serverless run plays its own environment's game.
        self.agents = {
            env_id: AgentFunction(
                self,
                _construct_id(env_id),
                prefix=prefix,
                env_id=env_id,
                role=self.roles.agent_role,
                encryption_key=encryption_key,
                log_retention_days=settings.log_retention_days,
            )
            for env_id, _ in enabled_environments(settings)
        }
        # Every environment a hyperpod run may use, as the SDK's CustomEnvironment(env_id, s3_uri=…) package, wordle
        # included: VFEnvId.WORDLE would install the starter kit's own wordle (the amzn-agi-verifiers fork's
        # environments/wordle), not the code mtrl validates datasets with and scores episodes with (docs/pipeline.md).
        self.env_packages = (
            NovaEnvironmentPackages(
                self, "NovaEnvironmentPackages", environments=enabled_environments(settings), data_bucket=data_bucket
            )
            if nova_forge
            else None
        )
        # The runner image needs the subscriber-only Forge HyperPod CLI (docker/nova-runner/hyperpod-cli/), so it is
        # built (and its task defined) only for a deployment that configures Nova Forge: a default deploy needs
        # nothing the repository does not ship (issue 36).
        self.runner = (
            NovaRunnerTask(
                self,
                "NovaRunner",
                prefix=prefix,
                task_role=runner_role,
                encryption_key=encryption_key,
                log_retention_days=settings.log_retention_days,
            )
            if runner_role is not None
            else None
        )
        if self.runner is not None:
            missing = hyperpod_cli_problem()
            if missing:
                cdk.Annotations.of(self.runner).add_warning_v2("mtrl:NovaRunnerHyperPodCli", missing)
        if cluster is not None and cluster.eks is not None and runner_role is not None:
            # The runner submits/reads/cancels the PyTorchJob through the HyperPod CLI: edit in the job namespaces,
            # read-only elsewhere (the same access as the job-submission role).
            eks.AccessEntry(
                self,
                "NovaRunnerEksAccess",
                cluster=cast(eks.ICluster, cluster.eks.cluster),  # as EksCluster does (jsii protocol gap)
                principal=runner_role.role_arn,
                access_policies=[
                    eks.AccessPolicy.from_access_policy_name(
                        EDIT_POLICY, access_scope_type=eks.AccessScopeType.NAMESPACE, namespaces=list(JOB_NAMESPACES)
                    ),
                    eks.AccessPolicy.from_access_policy_name(
                        VIEW_POLICY, access_scope_type=eks.AccessScopeType.CLUSTER
                    ),
                ],
            )
        # A verl run's pods reach S3 (run rows in, outputs out), the model copies and MLflow as this role only.
        self.verl_trainer = (
            VerlTrainerIdentity(
                self,
                "VerlTrainer",
                prefix=prefix,
                cluster_name=cluster.eks_cluster_name,
                namespace=verl_namespace(settings),
                data_bucket=data_bucket,
                data_key=encryption_key,
                models=settings.verl_models,
                mlflow_app_arn=self.mlflow_app_arn,
            )
            if cluster is not None and cluster.eks is not None
            else None
        )
        # The trainer image and the model copies are made in the account after deploy (mtrl image build / mtrl model
        # import), recorded in the deployment's catalog, and read by Preflight: no redeploy, no Docker on the laptop.
        # verl's builders only where verl runs can run (with the cluster; not in the serverless profile).
        self.image_builder = (
            ImageBuilder(
                self,
                "ImageBuilder",
                prefix=prefix,
                data_bucket=data_bucket,
                data_key=encryption_key,
                log_retention_days=settings.log_retention_days,
            )
            if settings.backend_problem("verl") is None
            else None
        )
        warning = settings.default_backend_warning()
        if warning:  # the synth says it too, before any GPU is touched (an image build or import supplies it later)
            cdk.Annotations.of(self.image_builder or self).add_warning_v2(
                "mtrl:default-backend-not-ready", f"{warning} (after cdk deploy)"
            )
        outputs: dict[str, tuple[str, str]] = {}
        if self.image_builder is not None:
            outputs["VerlTrainerRepositoryUri"] = (
                self.image_builder.repository.repository_uri,
                "Where mtrl image build verl pushes the trainer image",
            )
        outputs |= {
            "AgentFunctionNames": (
                ",".join(agent.function_name for agent in self.agents.values()),
                "Serverless MTRL agents, one per enabled environment",
            ),
            "ServerlessJobRoleArn": (self.roles.serverless_job_role.role_arn, "Role serverless MTRL jobs run with"),
            "ModelPackageGroupArn": (self.model_package_group_arn, "Where serverless runs register trained models"),
            "MlflowAppArn": (self.mlflow_app_arn, "MLflow app serverless jobs log to"),
        }
        if self.runner is not None and runner_role is not None:
            outputs["NovaRunnerRoleArn"] = (runner_role.role_arn, "Role of the Nova Forge runner task")
            outputs["RftRoleName"] = (self.roles.rft_role_name, "Nova Forge RFT role (its policy is <name>Policy)")
            outputs["NovaRunnerTaskDefinitionArn"] = (
                self.runner.task_definition.task_definition_arn,
                "Nova Forge runner task definition (hyperpod backend)",
            )
        for name, (value, description) in outputs.items():
            cdk.CfnOutput(self, name, value=value, description=description)

    def _model_package_group(self, settings: DeploySettings) -> str:
        """Where serverless runs register their models; retained when the stack is deleted.

        CloudFormation cannot delete a model package group that still holds model packages, and those packages are
        the trained models (run output, like the data bucket), so the group is kept (docs/operations.md, Destroy).
        A later deployment adopts it with ``serverless_adopt_model_package_group``.
        """
        name = f"{settings.prefix}-serverless"  # inside the job role's model-package-group/<prefix>-* scope
        if settings.serverless_adopt_model_package_group:
            return self.format_arn(service="sagemaker", resource="model-package-group", resource_name=name)
        package_group = sagemaker.CfnModelPackageGroup(
            self,
            "ModelPackageGroup",
            model_package_group_name=name,
            model_package_group_description=f"{settings.prefix}: models trained by serverless MTRL runs",
        )
        package_group.apply_removal_policy(cdk.RemovalPolicy.RETAIN)
        return package_group.attr_model_package_group_arn

    def _mlflow_app(self, prefix: str, data_bucket: s3.IBucket, key: kms.IKey) -> str:
        """An MLflow app with its artifacts under mlflow/ of the data bucket (the service requires one)."""
        role = iam.Role(
            self,
            "MlflowAppRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description=f"{prefix}: the MLflow app's artifact store (data bucket, {MLFLOW_PREFIX} only)",
        )
        data_bucket.grant_read_write(role, f"{MLFLOW_PREFIX}*")
        key.grant_encrypt_decrypt(role)
        app = sagemaker.CfnMlflowApp(
            self,
            "MlflowApp",
            name=f"{prefix}-mlflow",
            artifact_store_uri=f"s3://{data_bucket.bucket_name}/{MLFLOW_PREFIX}",
            role_arn=role.role_arn,
            model_registration_mode="AutoModelRegistrationDisabled",
        )
        app.node.add_dependency(role)
        policy = role.node.find_child("DefaultPolicy")
        rendered = self.resolve(policy.node.default_child.policy_document)  # type: ignore[union-attr]
        for statement in rendered["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            for action in actions:
                if "*" in action:
                    acknowledge(
                        policy,
                        f"AwsSolutions-IAM5[Action::{action}]",
                        "CDK's object read/write and data-key grants for the MLflow artifact store (mlflow/ only).",
                    )
            for resource in resources:
                spelled = nag_resource(self, resource) if not isinstance(resource, str) else resource
                if "*" in spelled:
                    acknowledge(
                        policy,
                        f"AwsSolutions-IAM5[Resource::{spelled}]",
                        "MLflow writes artifacts under run-specific keys; the grant is limited to mlflow/ of the data "
                        "bucket.",
                    )
        return app.attr_arn
