"""The ``hyperpod`` backend's descriptor: what the pipeline, the settings and the cost report ask of it.

A hyperpod run takes no per-run options (the group, its ceiling, the roles and the model are the operator's; a run
chooses its instance_count, worker_count and recipe overrides), scores every rollout on its reward workers, and has no
evaluation path in mtrl, so no baseline either.
"""

from __future__ import annotations

from typing import Any

from mtrl.contracts.descriptor import BackendDescriptor


def restricted_group_problem(settings: Any) -> str | None:
    """Nova Forge trains only on a restricted instance group: a deployment defaulting to hyperpod must name one."""
    if settings.hyperpod_restricted_instance_group is None:
        return (
            "run_backend: 'hyperpod' (Amazon Nova Forge) trains only on a restricted instance group, and "
            "hyperpod_restricted_instance_group is not set (set it, with a Nova Forge subscription, or use "
            "run_backend 'verl' to train open-weight models on the training group)"
        )
    return None


DESCRIPTOR = BackendDescriptor(
    name="hyperpod",
    adapter="mtrl.backends.hyperpod.adapter:HyperPodAdapter",
    no_baseline=(
        "Nova Forge on HyperPod has no evaluation path in mtrl (its Evaluate phase is skipped), so there is no "
        "evaluation to run before training nor an after-training score to compare it with; measure the base model "
        "with `mtrl eval ENV --policy hf:MODEL` (or openai:URL), or use the serverless or local backend"
    ),
    needs_reward_workers=True,
    needs_cluster=True,
    cost="mtrl.backends.hyperpod.cost:estimate",
    cost_usage="mtrl.backends.hyperpod.cost:usage_from_record",
    budget_usage="mtrl.backends.hyperpod.cost:budget_usage",
    deploy_check=restricted_group_problem,
    stack_side="stacks.backends.hyperpod:HyperPodStackSide",
)
