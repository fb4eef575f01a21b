"""Stack fixtures: templates from the session's default synth, plus one synth of a fully customized cluster."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Template

from mtrl.settings import eks_support
from stacks.app_builder import Deployment
from tests.conftest import make_app
from tests.unit.stacks.custom_cluster import CUSTOM_CLUSTER, SYNTH_DATE


@pytest.fixture(scope="session")
def cluster_template(deployment: Deployment) -> Template:
    return Template.from_stack(deployment.cluster)


@pytest.fixture(scope="session")
def cluster_json(cluster_template: Template) -> dict[str, Any]:
    return cluster_template.to_json()


@pytest.fixture(scope="module")
def custom_deployment() -> Deployment:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(eks_support, "utc_today", lambda: SYNTH_DATE)  # the support-window warning's clock
        app, deployment = make_app(CUSTOM_CLUSTER)
    app.synth()  # with cdk-nag: raises on any unacknowledged finding
    return deployment


@pytest.fixture(scope="module")
def custom_json(custom_deployment: Deployment) -> dict[str, Any]:
    return Template.from_stack(custom_deployment.cluster).to_json()


# The settings that configure Nova Forge (a restricted instance group with its defaults): only then does a deployment
# build the hyperpod backend's runner image and task (stacks/backends_stack.py).
NOVA_FORGE: dict[str, Any] = {"hyperpod_restricted_instance_group": {}}


@pytest.fixture(scope="session")
def nova_forge_synth() -> tuple[Deployment, Any]:
    """A deployment with every backend's parts: the default plus Nova Forge (synthesized once, with cdk-nag)."""
    app, deployment = make_app(NOVA_FORGE)
    return deployment, app.synth()


@pytest.fixture(scope="session")
def workers_template(deployment: Deployment) -> Template:
    return Template.from_stack(deployment.reward_workers)


@pytest.fixture(scope="session")
def workers_json(workers_template: Template) -> dict[str, Any]:
    return workers_template.to_json()
