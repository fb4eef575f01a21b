"""The toy backend's descriptor: the one object ``register_backend`` takes."""

from __future__ import annotations

from mtrl.contracts.descriptor import BackendDescriptor

DESCRIPTOR = BackendDescriptor(
    name="toy",
    adapter="tests.unit.backends.toy.adapter:ToyAdapter",
    run_options="tests.unit.backends.toy.options:ToyRunOptions",
    no_baseline="the toy backend plays no evaluation",
    cost="tests.unit.backends.toy.cost:estimate",
    cost_usage="tests.unit.backends.toy.cost:usage_from_record",
    budget_usage="tests.unit.backends.toy.cost:budget_usage",
)
