"""The hyperpod backend's stack side (``mtrl.backends.hyperpod``): its statements on the backend function
(``permissions``), the Nova Forge runner and RFT roles of the backends stack (``roles``), and the deploy-time values its
adapter reads (``HyperPodSettings``)."""

from __future__ import annotations

import aws_cdk as cdk

from mtrl.backends.hyperpod.common import HyperPodSettings
from stacks.backends.contract import StackInputs
from stacks.backends.hyperpod.permissions import HyperPodTargets, hyperpod_statements
from stacks.backends.permissions import BackendFunctionPolicy
from stacks.constructs.reward_workers import CONTAINER_NAME as REWARD_CONTAINER_NAME


class HyperPodStackSide:
    """Nova Forge on the HyperPod cluster: cluster scaling, the reward-worker and runner tasks on the reward cluster,
    each run's worker role and the teardown of the SDK's per-run stack."""

    def add_to_pipeline(self, inputs: StackInputs) -> None:
        statements, reasons = hyperpod_statements(
            cdk.Stack.of(inputs.scope), inputs.settings.prefix, HyperPodTargets.of(inputs)
        )
        BackendFunctionPolicy(
            inputs.scope,
            "BackendPermissionsHyperPod",
            role=inputs.function_role,
            statements=statements,
            wildcard_reasons=reasons,
        )

    def pipeline_values(self, inputs: StackInputs) -> HyperPodSettings:
        settings = inputs.settings
        group = settings.run_instance_group
        workers = inputs.reward_workers
        backends = inputs.backends
        runner, packages = backends.runner, backends.env_packages
        if runner is None or packages is None:  # deployed_sides wires this side only where the backend is deployed
            raise ValueError("the hyperpod backend is wired, but the backends stack built no Nova Forge runner for it")
        return HyperPodSettings.model_construct(
            region=inputs.region,
            prefix=settings.prefix,
            hyperpod_cluster_name=inputs.cluster.hyperpod_cluster_name,
            hyperpod_gpu_instance_group=group.name,
            hyperpod_idle_instance_count=group.idle_count,
            hyperpod_max_instance_count=group.run_count,
            hyperpod_capacity_timeout_minutes=settings.hyperpod_capacity_timeout_minutes,
            ecs_cluster_arn=workers.cluster.cluster_arn,
            task_subnet_ids=list(inputs.task_subnet_ids),
            task_security_group_ids=list(inputs.task_security_group_ids),
            reward_task_definition=workers.task_definition.family,
            reward_container_name=REWARD_CONTAINER_NAME,
            reward_worker_run_boundary_arn=workers.run_boundary.managed_policy_arn,
            reward_worker_base_policy_arn=workers.base_policy.managed_policy_arn,
            nova_runner_task_definition=runner.family,
            nova_runner_container_name=runner.container.container_name,
            nova_rft_role_name=backends.roles.rft_role_name,
            nova_model=settings.nova_model,
            nova_training_method=settings.nova_training_method,
            nova_forge_telemetry=settings.nova_forge_telemetry,
            # The content-addressed package of each environment (BackendsStack.env_packages deploys them).
            nova_env_package_uris=[
                f"{env_id}={package.uri(inputs.data_bucket.bucket_name)}"
                for env_id, package in packages.packages.items()
            ],
        )
