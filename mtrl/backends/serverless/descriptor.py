"""The ``serverless`` backend's descriptor: what the pipeline, the manifest checks and the cost report ask of it."""

from __future__ import annotations

from mtrl.contracts.descriptor import BackendDescriptor, BaselineSupport

DESCRIPTOR = BackendDescriptor(
    name="serverless",
    adapter="mtrl.backends.serverless.adapter:ServerlessAdapter",
    run_options="mtrl.backends.serverless.run_options:ServerlessRunOptions",
    baseline=BaselineSupport(
        phase=True,
        how="an AgentRFTEvaluation job of the base model on the held-out rows, before the training job",
        needs_held_out_rows=True,
    ),
    cost="mtrl.backends.serverless.cost:estimate",
    cost_usage="mtrl.backends.serverless.cost:usage_from_record",
    budget_usage="mtrl.backends.serverless.cost:budget_usage",
    manifest_check="mtrl.backends.serverless.options:run_hyperparameter_problems",
    stack_side="stacks.backends.serverless:ServerlessStackSide",
)
