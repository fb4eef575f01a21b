"""What the rest of mtrl knows about a backend: one frozen descriptor per backend (docs/pipeline.md, "For backend
authors").

The pipeline, the manifest checks, the cost report, the client and the settings ask a backend's descriptor instead of
comparing its name. Every hook is a ``"module:attribute"`` string (imported the first time it is used, so reading a
descriptor never loads the backend's SDK clients or models) or the object itself. This module imports nothing of
mtrl, so any layer may read a descriptor.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# "module:attribute", or the object itself (a platform team's backend may hand over callables).
Target = str | Callable[..., Any]


@dataclass(frozen=True)
class BaselineSupport:
    """How a backend measures a run's ``baseline_evaluation`` (the base model on the held-out split).

    ``phase``: True — the pipeline's Baseline phase runs before Submit (the adapter's ``baseline(run)``, a wait loop
    like Evaluate's); False — training itself evaluates the untrained policy first, and the Evaluate phase reports it.
    """

    phase: bool
    how: str
    needs_held_out_rows: bool = False  # an eval_dataset, or an eval_split (Validate writes its split files)


@dataclass(frozen=True)
class BackendDescriptor:
    """One backend, as the platform sees it. Only ``name`` and ``adapter`` are required.

    - ``adapter``: a zero-argument factory of the ``BackendAdapter`` (usually the adapter class).
    - ``run_options``: the per-run options model (a ``mtrl.contracts.run_options.RunOptions`` subclass); its fields
      are what a manifest's ``backend_options`` may set and its ``Field`` constraints their ceilings. None: none.
    - ``baseline``: how ``baseline_evaluation`` is measured; None with ``no_baseline`` saying why it cannot be.
    - ``needs_reward_workers``: every rollout is scored on the run's reward workers (``worker_count`` ≥ 1).
    - ``needs_cluster``: the backend trains on the deployment's HyperPod cluster; a deployment without one
      (``deploy_cluster=false``, the serverless profile) refuses its runs.
    - ``cost``: ``(usage, book) -> CostEstimate``, pricing the usage dict ``mtrl.backends.pricing.cost_for_run``
      receives; None: the backend's runs cannot be priced (a ``CostError`` says so).
    - ``cost_usage``: ``(record, now) -> dict``, the usage fields ``cost`` reads, taken from a stored run record
      (``mtrl cost RUN``); None: the record's backend and region are all it needs.
    - ``budget_usage``: ``(run context, adapter) -> dict``, the usage fields ``cost`` will read for this run, with
      nothing used yet (the instance type, the model, the service). Preflight prices it for a run with a budget:
      a run that cannot be priced is refused there, never run unchecked. None: budgeted runs are refused.
    - ``manifest_check``: ``(RunSettings) -> [problem, ...]``, backend rules on a resolved manifest (Register).
    - ``deploy_check``: ``(DeploySettings) -> problem | None``, what a deployment must configure to run this backend
      (hyperpod: a restricted instance group), naming the setting. A deployment whose default backend this is must
      pass it (checked when its settings are loaded); in any other that fails it (or lacks the cluster a
      ``needs_cluster`` backend trains on) the backend is not deployed: its stack side contributes nothing
      (``DeploySettings.backend_problem``).
    - ``registered_values``: ``(deploy-time values as shipped) -> values``, completed at Preflight (before the run's
      effective settings are stored) with what the deployment registered after deploy (a trainer image, model
      copies); explicit settings win. None: the shipped values are all there is.
    - ``readiness``: ``(DeploySettings, ssm client | None) -> [what is missing, naming the command that supplies it]``
      for a deployment whose default backend this is: shown by ``mtrl config show``, the synth and ``mtrl submit``
      before any GPU is touched (a warning: it can be supplied after deploy).
    - ``renderer``: ``(deploy settings, run settings, run) -> [Kubernetes objects]`` for ``mtrl render``.
    - ``stack_side``: ``"module:attribute"`` of the backend's stack side (``stacks.backends.contract.StackSide``):
      its IAM on the backend function, its constructs and the values it ships to its adapter. Only the stacks
      resolve it (the runtime never imports ``stacks``); None: the backend needs nothing deployed for it.
    """

    name: str
    adapter: Target
    run_options: Target | None = None
    baseline: BaselineSupport | None = None
    no_baseline: str = "the backend declares no baseline evaluation"
    needs_reward_workers: bool = False
    needs_cluster: bool = False
    cost: Target | None = None
    cost_usage: Target | None = None
    budget_usage: Target | None = None
    manifest_check: Target | None = None
    deploy_check: Target | None = None
    registered_values: Target | None = None
    readiness: Target | None = None
    renderer: Target | None = None
    stack_side: str | None = None


def resolve(target: Target) -> Any:
    """The object a hook names: ``"module:attribute"`` imported (ModuleNotFoundError if absent), else itself."""
    if not isinstance(target, str):
        return target
    module_name, separator, attribute = target.partition(":")
    if not separator or not module_name or not attribute:
        raise ValueError(f"backend hook {target!r} is not 'module:attribute'")
    return getattr(importlib.import_module(module_name), attribute)
