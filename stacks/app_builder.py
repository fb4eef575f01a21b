"""Compose the stacks of one deployment. All cross-stack wiring happens here and only here."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import aws_cdk as cdk

from mtrl.settings import DeploySettings, load_settings
from stacks.cluster_stack import ClusterStack
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


def settings_from_app(app: cdk.App, environ: Mapping[str, str] | None = None) -> DeploySettings:
    """Validate the app's context (cdk.json + `-c` overrides) into settings; raises SettingsError."""
    return load_settings(app.node.get_all_context(), environ=os.environ if environ is None else environ)


def build_deployment(app: cdk.App, settings: DeploySettings) -> Deployment:
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
    _finish(app, prefix, data, network, cluster, reward_workers, pipeline)
    return Deployment(
        settings=settings, data=data, network=network, cluster=cluster, reward_workers=reward_workers, pipeline=pipeline
    )


def _finish(app: cdk.App, prefix: str, *stacks: cdk.Stack) -> None:
    for stack in stacks:
        cdk.Tags.of(stack).add("mtrl:deployment", prefix)
    enable_checks(app)
