"""Compose the stacks of one deployment. All cross-stack wiring happens here and only here."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import aws_cdk as cdk

from mtrl.backends.verl.config import verl_backend_values
from mtrl.envs import custom_environment_problems
from mtrl.settings import DeploySettings, SettingsError, load_settings
from stacks.backends_stack import BackendsStack
from stacks.cluster_stack import ClusterStack
from stacks.constructs.backend_permissions import BackendPermissions, HyperPodTargets, ServerlessTargets, VerlTargets
from stacks.constructs.kuberay import grant_pipeline_access
from stacks.constructs.reward_workers import CONTAINER_NAME as REWARD_CONTAINER_NAME
from stacks.data_stack import DataStack
from stacks.nag import enable_checks
from stacks.network_stack import NetworkStack
from stacks.pipeline_stack import PipelineStack
from stacks.reward_workers_stack import RewardWorkersStack


@dataclass(frozen=True)
class Deployment:
    """The stacks of one deployment; the emulator variant has only ``data`` and ``pipeline``."""

    settings: DeploySettings
    data: DataStack
    pipeline: PipelineStack
    network: NetworkStack | None = None
    cluster: ClusterStack | None = None
    reward_workers: RewardWorkersStack | None = None
    backends: BackendsStack | None = None


def settings_from_app(app: cdk.App, environ: Mapping[str, str] | None = None) -> DeploySettings:
    """Validate the app's context (cdk.json + `-c` overrides) into settings; raises SettingsError."""
    return load_settings(app.node.get_all_context(), environ=os.environ if environ is None else environ)


def check_environment_package(settings: DeploySettings) -> None:
    """With ``use_custom_env``, synth fails unless the package imports, has ``load_environment`` and plays one
    smoke episode (the same code reaches the workers' image and the Lambdas' code staging)."""
    problems = custom_environment_problems(settings.use_custom_env, settings.custom_env_id)
    if problems:
        raise SettingsError(problems)


def build_deployment(app: cdk.App, settings: DeploySettings) -> Deployment:
    check_environment_package(settings)
    env = cdk.Environment(account=settings.account, region=settings.region)
    prefix = settings.prefix
    description = "mtrl multi-turn RL training platform"
    data = DataStack(app, f"{prefix}-data", settings=settings, env=env, description=f"{description}: data")
    pipeline = PipelineStack(
        app,
        f"{prefix}-pipeline",
        settings=settings,
        key=data.store.key,
        bucket=data.store.data_bucket,
        table=data.store.run_table,
        env=env,
        description=f"{description}: run pipeline",
    )
    if settings.emulator:
        # The offline demo's reduced variant: what the `local` backend needs and the emulator can deploy
        # (no VPC/NAT, no EKS/HyperPod, no container image assets; docs/emulator.md).
        _finish(app, prefix, data, pipeline)
        return Deployment(settings=settings, data=data, pipeline=pipeline)
    network = NetworkStack(
        app,
        f"{prefix}-network",
        settings=settings,
        encryption_key=data.store.key,
        env=env,
        description=f"{description}: network",
    )
    cluster = ClusterStack(
        app,
        f"{prefix}-cluster",
        settings=settings,
        vpc=network.network.vpc,
        security_group=network.network.hyperpod_security_group,
        encryption_key=data.store.key,
        access_log_bucket=data.store.access_log_bucket,
        data_bucket=data.store.data_bucket,
        run_table=data.store.run_table,
        env=env,
        description=f"{description}: EKS + HyperPod cluster",
    )
    reward_workers = RewardWorkersStack(
        app,
        f"{prefix}-reward-workers",
        settings=settings,
        vpc=network.network.vpc,
        security_group=network.network.reward_worker_security_group,
        data_bucket=data.store.data_bucket,
        encryption_key=data.store.key,
        env=env,
        description=f"{description}: reward workers",
    )
    backends = BackendsStack(
        app,
        f"{prefix}-backends",
        settings=settings,
        data_bucket=data.store.data_bucket,
        encryption_key=data.store.key,
        cluster=cluster,
        reward_cluster_arn=reward_workers.workers.cluster.cluster_arn,
        env=env,
        description=f"{description}: training backends (IAM, serverless agent, Nova Forge runner)",
    )
    _wire_backends(
        settings,
        data=data,
        network=network,
        cluster=cluster,
        reward_workers=reward_workers,
        backends=backends,
        pipeline=pipeline,
    )
    _finish(app, prefix, data, network, cluster, reward_workers, backends, pipeline)
    return Deployment(
        settings=settings,
        data=data,
        network=network,
        cluster=cluster,
        reward_workers=reward_workers,
        backends=backends,
        pipeline=pipeline,
    )


def _wire_backends(
    settings: DeploySettings,
    *,
    data: DataStack,
    network: NetworkStack,
    cluster: ClusterStack,
    reward_workers: RewardWorkersStack,
    backends: BackendsStack,
    pipeline: PipelineStack,
) -> None:
    """The backend function's permissions and the deploy-time settings both adapters read (docs/pipeline.md)."""
    workers = reward_workers.workers
    roles = backends.roles
    runner = backends.runner.task_definition
    task_roles = [workers.task_role.role_arn, runner.task_role.role_arn]
    task_roles += [role.role_arn for role in (workers.task_definition.execution_role, runner.execution_role) if role]
    BackendPermissions(
        pipeline,
        "BackendPermissions",
        role=pipeline.backend.role,
        prefix=settings.prefix,
        hyperpod=HyperPodTargets(
            hyperpod_cluster_arn=cluster.hyperpod_cluster_arn,
            node_role_arn=cluster.execution_role.role_arn if cluster.execution_role else None,
            # The literal name RewardWorkers gives its cluster: a cross-stack token would not render in the
            # acknowledgment ids of the task-scoped statements.
            reward_cluster_name=f"{settings.prefix}-reward-workers",
            task_families=[workers.task_definition.family, backends.runner.family],
            task_role_arns=task_roles,
            worker_run_boundary_arn=workers.run_boundary.managed_policy_arn,
            worker_base_policy_arn=workers.base_policy.managed_policy_arn,
        ),
        verl=VerlTargets.of(
            eks_cluster_arn=cluster.eks_cluster_arn, models=settings.verl_models, image_uri=settings.verl_image_uri
        ),
        serverless=ServerlessTargets(
            job_role_arn=roles.serverless_job_role.role_arn,
            agent_function_arns=[agent.function.function_arn for agent in backends.agents.values()],
            agent_runtime_arns=tuple(settings.usable_agent_runtime_arns),
            mlflow_app_arn=backends.mlflow_app_arn,
            model_package_group_arn=backends.model_package_group_arn,
            data_bucket_arn=data.store.data_bucket.bucket_arn,
        ),
    )
    if cluster.kuberay is not None:
        # The verl adapter runs in the backend function: it reaches the run namespace through its Kubernetes group.
        grant_pipeline_access(
            pipeline,
            "VerlPipelineEksAccess",
            cluster_name=cluster.eks_cluster_name,
            role=pipeline.backend.role,
            namespace=cluster.kuberay.namespace,
        )
    group = settings.run_instance_group
    values: dict[str, str | list[str]] = {
        # hyperpod (mtrl.backends.hyperpod.HyperPodSettings)
        "hyperpod_cluster_name": cluster.hyperpod_cluster_name,
        "hyperpod_gpu_instance_group": group.name,
        "hyperpod_idle_instance_count": str(group.idle_count),
        "hyperpod_max_instance_count": str(group.run_count),
        "hyperpod_capacity_timeout_minutes": str(settings.hyperpod_capacity_timeout_minutes),
        "ecs_cluster_arn": workers.cluster.cluster_arn,
        "task_subnet_ids": [subnet.subnet_id for subnet in network.network.vpc.private_subnets],
        "task_security_group_ids": [network.network.reward_worker_security_group.security_group_id],
        "reward_task_definition": workers.task_definition.family,
        "reward_container_name": REWARD_CONTAINER_NAME,
        "reward_worker_run_boundary_arn": workers.run_boundary.managed_policy_arn,
        "reward_worker_base_policy_arn": workers.base_policy.managed_policy_arn,
        "nova_runner_task_definition": backends.runner.family,
        "nova_runner_container_name": backends.runner.container.container_name,
        "nova_rft_role_name": roles.rft_role_name,
        "nova_model": settings.nova_model,
        "nova_training_method": settings.nova_training_method,
        "nova_forge_telemetry": "true" if settings.nova_forge_telemetry else "false",
        # The content-addressed package of each environment (BackendsStack.env_packages deploys them).
        "nova_env_package_uris": [
            f"{env_id}={package.uri(data.store.data_bucket.bucket_name)}"
            for env_id, package in backends.env_packages.packages.items()
        ],
        # serverless (mtrl.backends.serverless.settings.ServerlessSettings)
        "serverless_job_role_arn": roles.serverless_job_role.role_arn,
        "serverless_agent_lambda_arns": [
            f"{env_id}={agent.function.function_arn}" for env_id, agent in backends.agents.items()
        ],
        "serverless_mlflow_app_arn": backends.mlflow_app_arn,
        "serverless_model_package_group_arn": backends.model_package_group_arn,
        "serverless_base_model": settings.serverless_base_model,
        "serverless_accept_eula": "true" if settings.serverless_accept_eula else "false",
    }
    if settings.serverless_agent_runtime_arn:
        values["serverless_agent_runtime_arn"] = settings.serverless_agent_runtime_arn
    # verl (mtrl.backends.verl.config.VerlRunConfig): the training group, the EKS API, the run namespace, ceilings
    values.update(verl_backend_values(settings, eks_cluster_name=cluster.eks_cluster_name))
    for name, value in values.items():
        pipeline.add_backend_setting(name, value)
    # The GPU safety net watches the groups runs scale: the training group and the restricted group (a created
    # cluster), or the configured run group of an existing cluster.
    if settings.uses_existing_cluster:
        watched = [settings.run_instance_group]
    else:
        restricted = settings.hyperpod_restricted_instance_group
        watched = [
            *(g for g in settings.hyperpod_instance_groups if g.purpose == "training"),
            *filter(None, [restricted]),
        ]
    pipeline.add_capacity_guard(
        cluster_name=cluster.hyperpod_cluster_name,
        cluster_arn=cluster.hyperpod_cluster_arn,
        node_role_arn=cluster.execution_role.role_arn if cluster.execution_role else None,
        idle_counts={group.name: group.idle_count for group in watched},
    )


def _finish(app: cdk.App, prefix: str, *stacks: cdk.Stack) -> None:
    for stack in stacks:
        cdk.Tags.of(stack).add("mtrl:deployment", prefix)
    enable_checks(app)
