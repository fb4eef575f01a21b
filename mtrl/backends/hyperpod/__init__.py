"""The ``hyperpod`` backend: Amazon Nova Forge multi-turn RFT on the HyperPod cluster, reward workers on ECS.

Per run it holds three things, each recorded on the run before it is created and removed by ``cleanup``:

1. **GPU capacity** — the configured instance group scaled from its idle count to the run's count with SageMaker
   ``UpdateCluster`` (the full group spec read from ``DescribeCluster``; only the count changes). Ready means the
   target count of nodes is ``Running`` in ``ListClusterNodes``: an ``InService`` cluster with no GPU nodes is not
   ready. Capacity/quota failures are read from ``ListClusterEvents`` and node status messages.
2. **Nova Forge per-run infrastructure and the job** — the Nova Forge SDK needs Python ≥ 3.12 and the HyperPod
   CLI, so it runs in a container task (``nova_runner`` here) started with ECS ``RunTask`` and a command
   (``setup``/``submit``/``status``/``cancel``/``teardown``). The adapter writes the run's spec to
   ``runs/<run-id>/backend/spec.json`` and reads each command's result from ``runs/<run-id>/backend/<cmd>.json``.
   ``setup`` deploys one CloudFormation stack per run, ``<base>-NovaForgeSDK`` (``naming.run_stack_base``),
   deleted in cleanup.
3. **Reward workers** — ``worker_count`` Fargate tasks of the reward-worker task definition, started with the
   run's environment id/args and the per-run queue endpoints, found again by their ``startedBy`` token, under the
   run's own task role ``<base>-worker`` (``worker_role.py``: the run's queues and proxy only).

``provision`` is a reconcile step: each call advances what it can and raises ``ProvisioningInProgress`` (a
transient ``BackendError``) until everything is ready, so the pipeline retries it with back-off; capacity that
never arrives is bounded by ``hyperpod_capacity_timeout_minutes``. GPU groups are not shared between concurrent
runs: give each training slot its own instance group (``hyperpod_gpu_instance_group``).
"""

from mtrl.backends.hyperpod.adapter import HyperPodAdapter
from mtrl.backends.hyperpod.capacity import GpuCapacity, find_group, gpu_holds, group_spec
from mtrl.backends.hyperpod.common import (
    CAPACITY_KIND,
    STACK_KIND,
    TASK_DEFINITIONS_KIND,
    TASKS_KIND,
    WORKER_ROLE_KIND,
    HyperPodSettings,
    ProvisioningInProgress,
    RunnerCommand,
    parse_settings,
)
from mtrl.backends.hyperpod.naming import (
    SDK_STACK_SUFFIX,
    cloudformation_stack_name,
    run_name_pattern,
    run_stack_base,
    run_stack_stem,
    sdk_stack_name,
    worker_role_name,
    worker_role_pattern,
)

__all__ = [
    "CAPACITY_KIND",
    "SDK_STACK_SUFFIX",
    "STACK_KIND",
    "TASKS_KIND",
    "TASK_DEFINITIONS_KIND",
    "WORKER_ROLE_KIND",
    "GpuCapacity",
    "HyperPodAdapter",
    "HyperPodSettings",
    "ProvisioningInProgress",
    "RunnerCommand",
    "cloudformation_stack_name",
    "find_group",
    "gpu_holds",
    "group_spec",
    "parse_settings",
    "run_name_pattern",
    "run_stack_base",
    "run_stack_stem",
    "sdk_stack_name",
    "worker_role_name",
    "worker_role_pattern",
]
