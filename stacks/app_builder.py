"""Compose the stacks of one deployment. All cross-stack wiring happens here and only here."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import aws_cdk as cdk

from mtrl.envs import deployment_environment_problems
from mtrl.settings import DeploySettings, SettingsError, load_settings
from stacks.backends.contract import BackendResources, ClusterRefs, StackInputs, deployed_sides, shipped_values
from stacks.backends_stack import BackendsStack
from stacks.cluster_stack import ClusterStack
from stacks.constructs.encrypted_log_group import give_every_function_a_log_group
from stacks.constructs.kubernetes_access import KubernetesApiAccess
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
    cluster: ClusterStack | None = None  # None too in the serverless profile (deploy_cluster=false)
    reward_workers: RewardWorkersStack | None = None
    backends: BackendsStack | None = None


def settings_from_app(app: cdk.App, environ: Mapping[str, str] | None = None) -> DeploySettings:
    """Validate the app's context (cdk.json + `-c` overrides) into settings; raises SettingsError."""
    return load_settings(app.node.get_all_context(), environ=os.environ if environ is None else environ)


def check_environment_package(settings: DeploySettings) -> None:
    """With ``use_custom_env``, synth fails unless the package imports, has ``load_environment`` and plays one
    smoke episode (the same code reaches the workers' image and the Lambdas' code staging); run_environment must be
    an environment the deployment serves (a built-in, or the custom one)."""
    problems = deployment_environment_problems(
        run_environment=settings.run_environment,
        use_custom_env=settings.use_custom_env,
        custom_env_id=settings.custom_env_id,
    )
    if problems:
        raise SettingsError(problems)


def build_deployment(app: cdk.App, settings: DeploySettings) -> Deployment:
    check_environment_package(settings)
    env = cdk.Environment(account=settings.account, region=settings.region)
    prefix = settings.prefix
    description = "mtrl multi-turn RL training platform"
    data = DataStack(app, f"{prefix}-data", settings=settings, env=env, description=f"{description}: data")
    if settings.emulator:
        # The offline demo's reduced variant: what the `local` backend needs and the emulator can deploy
        # (no VPC/NAT, no EKS/HyperPod, no container image assets; docs/emulator.md).
        pipeline = _pipeline_stack(app, settings, data, env=env, description=description, kubernetes_access=None)
        _finish(app, settings, data, pipeline)
        return Deployment(settings=settings, data=data, pipeline=pipeline)
    network = NetworkStack(
        app,
        f"{prefix}-network",
        settings=settings,
        encryption_key=data.store.key,
        env=env,
        description=f"{description}: network",
    )
    # With a cluster this deployment creates, the backend function (verl's Kubernetes calls) runs in the private
    # subnets and reaches the cluster's private endpoint, which the cluster's group admits it to (eks_endpoint_access).
    # An existing cluster's endpoint and groups are not this deployment's: the function stays outside the VPC there.
    creates_cluster = settings.deploy_cluster and not settings.uses_existing_cluster
    pipeline = _pipeline_stack(
        app,
        settings,
        data,
        env=env,
        description=description,
        kubernetes_access=KubernetesApiAccess(
            vpc=network.network.vpc,
            subnets=network.network.private_subnets,
            control_plane_security_group=network.network.hyperpod_security_group,
        )
        if creates_cluster
        else None,
    )
    cluster = (
        ClusterStack(
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
        if settings.deploy_cluster
        else None  # the serverless profile: no EKS control plane, no HyperPod cluster
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
    _finish(app, settings, data, *filter(None, [network, cluster, reward_workers, backends, pipeline]))
    return Deployment(
        settings=settings,
        data=data,
        network=network,
        cluster=cluster,
        reward_workers=reward_workers,
        backends=backends,
        pipeline=pipeline,
    )


def _pipeline_stack(
    app: cdk.App,
    settings: DeploySettings,
    data: DataStack,
    *,
    env: cdk.Environment,
    description: str,
    kubernetes_access: KubernetesApiAccess | None,
) -> PipelineStack:
    return PipelineStack(
        app,
        f"{settings.prefix}-pipeline",
        settings=settings,
        key=data.store.key,
        bucket=data.store.data_bucket,
        table=data.store.run_table,
        kubernetes_access=kubernetes_access,
        env=env,
        description=f"{description}: run pipeline",
    )


def _wire_backends(
    settings: DeploySettings,
    *,
    data: DataStack,
    network: NetworkStack,
    cluster: ClusterStack | None,
    reward_workers: RewardWorkersStack,
    backends: BackendsStack,
    pipeline: PipelineStack,
) -> None:
    """Every registered backend's stack side: its permissions and constructs on the pipeline's backend function, and
    the deploy-time values its adapter reads (docs/pipeline.md); then the cluster's GPU safety net."""
    node_role_arn = cluster.execution_role.role_arn if cluster is not None and cluster.execution_role else None
    inputs = StackInputs(
        settings=settings,
        scope=pipeline,
        function_role=pipeline.backend.role,
        region=pipeline.region,
        data_bucket=data.store.data_bucket,
        data_key=data.store.key,
        cluster_refs=_cluster_refs(cluster, node_role_arn),
        task_subnet_ids=[subnet.subnet_id for subnet in network.network.task_subnets],
        task_public_ip=network.network.tasks_need_public_ip,
        task_security_group_ids=[network.network.reward_worker_security_group.security_group_id],
        reward_workers=reward_workers.workers,
        backends=BackendResources(
            roles=backends.roles,
            agents=backends.agents,
            runner=backends.runner,
            env_packages=backends.env_packages,
            mlflow_app_arn=backends.mlflow_app_arn,
            model_package_group_arn=backends.model_package_group_arn,
        ),
    )
    # Only the backends this deployment can run: one it cannot (no cluster, or what its descriptor's deploy_check
    # names) contributes nothing, and its runs are refused naming the setting to change.
    for name, side in deployed_sides(settings):
        side.add_to_pipeline(inputs)
        pipeline.add_backend_values(name, shipped_values(side.pipeline_values(inputs)))
    if cluster is None:
        return
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
        node_role_arn=node_role_arn,
        idle_counts={group.name: group.idle_count for group in watched},
    )


def _cluster_refs(cluster: ClusterStack | None, node_role_arn: str | None) -> ClusterRefs | None:
    if cluster is None:
        return None
    return ClusterRefs(
        hyperpod_cluster_name=cluster.hyperpod_cluster_name,
        hyperpod_cluster_arn=cluster.hyperpod_cluster_arn,
        node_role_arn=node_role_arn,
        eks_cluster_name=cluster.eks_cluster_name,
        eks_cluster_arn=cluster.eks_cluster_arn,
        kuberay_namespace=cluster.kuberay.namespace if cluster.kuberay is not None else None,
    )


def _finish(app: cdk.App, settings: DeploySettings, data: DataStack, *stacks: cdk.Stack) -> None:
    for stack in (data, *stacks):
        cdk.Tags.of(stack).add("mtrl:deployment", settings.prefix)
        # The functions CDK adds for its custom resources log to a group of the stack, with the deployment's retention.
        give_every_function_a_log_group(
            stack, encryption_key=data.store.key, retention_days=settings.log_retention_days
        )
    enable_checks(app)
