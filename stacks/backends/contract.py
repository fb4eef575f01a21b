"""The stack side of a backend: what a deployment builds for it, next to its runtime package.

A backend's descriptor names its stack side (``BackendDescriptor.stack_side``, ``"module:attribute"``); only the
stacks resolve it. The composition root (``stacks/app_builder.py``) hands every registered backend's stack side the
same narrow values (``StackInputs``) and knows none of a backend's settings or statements. A stack side

- adds its IAM statements to the pipeline's backend function role, and creates the constructs only it needs
  (``add_to_pipeline``);
- returns its **pipeline values** (``pipeline_values``): an instance of the very pydantic model its adapter validates
  its settings with, built at synth without validation (``model_construct``: CDK tokens are placeholder strings). The
  pipeline ships each backend's values, as JSON, under the backend's name (``PipelineStack.add_backend_values``), and
  the adapter of a run receives only its own backend's values merged with the run's settings.

Only the backends a deployment can run are deployed (``deployed_sides``): a backend whose descriptor says this
deployment cannot run it (``DeploySettings.backend_problem``: no cluster for a ``needs_cluster`` backend, or its
``deploy_check``'s problem, e.g. hyperpod without a restricted instance group) adds no statement, construct or value,
and its runs are refused naming the setting to change (Register for a missing cluster; else Preflight, which finds no
values shipped for it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pydantic import BaseModel

from mtrl.contracts.descriptor import resolve
from mtrl.contracts.registry import backend_names, descriptor_for

if TYPE_CHECKING:  # types only: CDK and the constructs load with the stacks that use them
    from aws_cdk import aws_iam as iam
    from aws_cdk import aws_kms as kms
    from aws_cdk import aws_s3 as s3
    from constructs import Construct

    from mtrl.settings import DeploySettings
    from stacks.constructs.agent_function import AgentFunction
    from stacks.constructs.nova_env_packages import NovaEnvironmentPackages
    from stacks.constructs.nova_runner_task import NovaRunnerTask
    from stacks.constructs.reward_workers import RewardWorkers


@dataclass(frozen=True)
class ClusterRefs:
    """The deployment's HyperPod cluster and its EKS cluster, by name and ARN.

    ``hyperpod_cluster_arn`` None: an existing cluster (its ARN ends in an id the configuration does not know);
    ``node_role_arn`` None: no execution role known; ``kuberay_namespace`` None: no KubeRay operator installed.
    """

    hyperpod_cluster_name: str
    hyperpod_cluster_arn: str | None
    node_role_arn: str | None
    eks_cluster_name: str
    eks_cluster_arn: str
    kuberay_namespace: str | None = None


class BackendRoleRefs(Protocol):
    """The roles the backends stack creates that a backend's pipeline values name (``stacks.backends.roles``
    composes them; naming the protocol, not that class, keeps this module below the backends' role builders)."""

    @property
    def serverless_job_role(self) -> iam.IRole: ...

    @property
    def rft_role_name(self) -> str: ...


@dataclass(frozen=True)
class BackendResources:
    """What the backends stack deploys for the training backends."""

    roles: BackendRoleRefs
    agents: Mapping[str, AgentFunction]  # environment id → its serverless agent
    runner: NovaRunnerTask | None  # None: the hyperpod backend is not deployed (no runner image or task)
    env_packages: NovaEnvironmentPackages | None  # None: the hyperpod backend is not deployed (nothing uploaded)
    mlflow_app_arn: str
    model_package_group_arn: str


@dataclass(frozen=True)
class StackInputs:
    """What every backend's stack side receives. ``scope`` is where its constructs for the backend function go."""

    settings: DeploySettings
    scope: Construct
    function_role: iam.IRole
    region: str
    data_bucket: s3.IBucket
    data_key: kms.IKey
    cluster_refs: ClusterRefs | None  # None: no cluster (deploy_cluster=false); sides that need one are not wired
    task_subnet_ids: Sequence[str]
    task_security_group_ids: Sequence[str]
    reward_workers: RewardWorkers
    backends: BackendResources
    task_public_ip: bool = False  # tasks in task_subnet_ids reach AWS through a public IP (no NAT gateway)

    @property
    def cluster(self) -> ClusterRefs:
        if self.cluster_refs is None:
            raise ValueError("this backend needs the deployment's cluster, and it has none (deploy_cluster=false)")
        return self.cluster_refs


@runtime_checkable
class StackSide(Protocol):
    """One backend's part of a deployment (see the module docstring)."""

    def add_to_pipeline(self, inputs: StackInputs) -> None:
        """Add the backend's IAM statements to ``inputs.function_role`` and create the constructs only it needs."""
        ...

    def pipeline_values(self, inputs: StackInputs) -> BaseModel:
        """The deploy-time values its adapter reads, as an instance of the adapter's own settings model."""
        ...


def stack_side_for(backend: str) -> StackSide | None:
    """The stack side the backend's descriptor names (a class is instantiated), None when it names none."""
    target = descriptor_for(backend).stack_side
    if target is None:
        return None
    found = resolve(target)
    side = found() if isinstance(found, type) else found
    if not isinstance(side, StackSide):
        raise TypeError(f"backend '{backend}': {target} is not a stack side (add_to_pipeline, pipeline_values)")
    return side


def deployed_sides(settings: DeploySettings) -> list[tuple[str, StackSide]]:
    """(name, stack side) of every registered backend with a stack side that this deployment can run, in registry
    order; a backend it cannot run (``settings.backend_problem``) is left out, so it contributes nothing."""
    sides: list[tuple[str, StackSide]] = []
    for name in backend_names():
        side = stack_side_for(name)
        if side is not None and settings.backend_problem(name) is None:
            sides.append((name, side))
    return sides


def shipped_values(values: BaseModel) -> dict[str, object]:
    """The values as the pipeline ships them: only the fields the stack side set, numbers and booleans as such."""
    return values.model_dump(mode="json", exclude_unset=True)
