"""A verl run's settings and Kubernetes objects computed offline from the deployment's settings (``mtrl render``).

The same composition the pipeline makes at run time (mtrl.runs.phases.inputs, at Preflight): the backend settings the
deployment ships (``verl_pipeline_values``) ∪ the run's settings ∪ its per-run options (``effective_settings``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol

from mtrl.backends.verl.config import plan_for, verl_pipeline_values
from mtrl.backends.verl.rayjob import render
from mtrl.contracts.backend import RunContext
from mtrl.contracts.run_options import effective_settings
from mtrl.settings.deploy import DeploySettings


class RunChoices(Protocol):
    """What the renderer reads of a resolved run (the pipeline's ``RunSettings``, which sits above the backends)."""

    @property
    def backend_options(self) -> Mapping[str, Any]: ...

    def model_dump(self, *, mode: str, exclude: set[str]) -> dict[str, Any]: ...


def offline_cluster_names(settings: DeploySettings) -> tuple[str, str]:
    """(HyperPod cluster name, EKS cluster name) as the cluster stack names them (or the existing ones)."""
    if settings.existing_hyperpod_cluster_name and settings.existing_eks_cluster_name:
        return settings.existing_hyperpod_cluster_name, settings.existing_eks_cluster_name
    return f"{settings.prefix}-hyperpod", f"{settings.prefix}-eks"


def offline_run_settings(deploy: DeploySettings, run_settings: RunChoices, run_id: str) -> dict[str, Any]:
    hyperpod_cluster, eks_cluster = offline_cluster_names(deploy)
    values = verl_pipeline_values(
        deploy,
        region=deploy.region,
        hyperpod_cluster_name=hyperpod_cluster,
        eks_cluster_name=eks_cluster,
        # The MLflow app the trainer logs to: the operator's, when named (one the stack creates has an id only
        # the deployment knows, so an offline render shows none).
        mlflow_app_arn=deploy.serverless_mlflow_app_arn,
    )
    return effective_settings(
        values.model_dump(mode="json", exclude_unset=True),
        {**run_settings.model_dump(mode="json", exclude={"backend_options"}), "run_id": run_id},
        backend="verl",
        options=run_settings.backend_options,
    )


def render_run(deploy: DeploySettings, run_settings: RunChoices, run: RunContext) -> list[dict[str, Any]]:
    """The run's [ConfigMap, RayJob] (``run.settings`` is ignored: they are computed from ``deploy``)."""
    settings = offline_run_settings(deploy, run_settings, run.run_id)
    return render(plan_for(settings), replace(run, settings=settings))
