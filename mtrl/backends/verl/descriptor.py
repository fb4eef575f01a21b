"""The ``verl`` backend's descriptor: what the pipeline, the manifest checks and ``mtrl render`` ask of it.

verl runs are not priced by ``mtrl.cost`` (no ``cost`` hook): the GPU group's instances are the deployment's.
"""

from __future__ import annotations

from mtrl.contracts.descriptor import BackendDescriptor, BaselineSupport

DESCRIPTOR = BackendDescriptor(
    name="verl",
    adapter="mtrl.backends.verl.adapter:VerlAdapter",
    run_options="mtrl.backends.verl.options:VerlRunOptions",
    baseline=BaselineSupport(
        phase=False,
        how="verl's validation before training (trainer.val_before_train): the base model plays the held-out rows "
        "through the same mtrl agent loop as training, and again after the last step",
        needs_held_out_rows=True,
    ),
    manifest_check="mtrl.backends.verl.hyperparameters:run_hyperparameter_problems",
    registered_values="mtrl.backends.verl.catalog:registered_values",
    readiness="mtrl.backends.verl.readiness:readiness",
    renderer="mtrl.backends.verl.offline:render_run",
    stack_side="stacks.backends.verl:VerlStackSide",
)
