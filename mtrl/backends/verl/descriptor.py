"""The ``verl`` backend's descriptor: what the pipeline, the manifest checks and ``mtrl render`` ask of it.

A verl run is priced like a hyperpod run: the GPU instance-hours it holds on the deployment's training group
(the same capacity resources, ``mtrl.backends.hyperpod.cost``).
"""

from __future__ import annotations

from mtrl.contracts.descriptor import BackendDescriptor, BaselineSupport

DESCRIPTOR = BackendDescriptor(
    name="verl",
    adapter="mtrl.backends.verl.adapter:VerlAdapter",
    needs_cluster=True,
    run_options="mtrl.backends.verl.options:VerlRunOptions",
    baseline=BaselineSupport(
        phase=False,
        how="verl's validation before training (trainer.val_before_train): the base model plays the held-out rows "
        "through the same mtrl agent loop as training, and again after the last step",
        needs_held_out_rows=True,
    ),
    cost="mtrl.backends.hyperpod.cost:estimate",
    cost_usage="mtrl.backends.hyperpod.cost:usage_from_record",
    budget_usage="mtrl.backends.verl.cost:budget_usage",
    manifest_check="mtrl.backends.verl.hyperparameters:run_hyperparameter_problems",
    registered_values="mtrl.backends.verl.catalog:registered_values",
    readiness="mtrl.backends.verl.readiness:readiness",
    renderer="mtrl.backends.verl.offline:render_run",
    stack_side="stacks.backends.verl:VerlStackSide",
)
