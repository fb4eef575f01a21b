"""The ``sessions`` backend's descriptor: what the pipeline, the manifest checks and the cost report ask of it
(read without importing the adapter, torch or the SageMaker clients)."""

from __future__ import annotations

from mtrl.contracts.descriptor import BackendDescriptor, BaselineSupport

DESCRIPTOR = BackendDescriptor(
    name="sessions",
    adapter="mtrl.backends.sessions.adapter:SessionsAdapter",
    run_options="mtrl.backends.sessions.options:SessionsRunOptions",
    baseline=BaselineSupport(
        phase=False,
        how="the loop evaluates the untrained policy on the held-out rows before its first step, through the same "
        "episode driver as after training",
        needs_held_out_rows=True,
    ),
    cost="mtrl.backends.sessions.cost:estimate",
    cost_usage="mtrl.backends.sessions.cost:usage_from_record",
    budget_usage="mtrl.backends.sessions.cost:budget_usage",
    stack_side="stacks.backends.sessions:SessionsStackSide",
)
