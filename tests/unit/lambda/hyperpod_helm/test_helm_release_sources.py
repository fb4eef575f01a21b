"""The deploy-time installer's other releases (``prepare_chart`` in lambda/hyperpod_helm/helm_release/
chart_source.py): a GitHub directory verified by its files' digest with its CRDs applied first (the KubeRay operator),
and a chart made from objects rendered at synth (the verl namespace's RBAC), which downloads nothing."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from mtrl.backends.verl.access import ROLE_NAME, namespace_manifests, pipeline_group
from mtrl.kube.charts import ChartDigestError, tree_sha256
from stacks.constructs.kuberay import KUBERAY_OPERATOR_DIGEST, OPERATOR_NAMESPACE, OPERATOR_RELEASE, operator_values

COMMIT = "59d663aeec13760646da3db9c1cf8cfe883e30b7"
CHART_FILES = {
    "Chart.yaml": b"apiVersion: v2\nname: kuberay-operator\nversion: 1.7.0\n",
    "crds/ray.io_rayjobs.yaml": b"apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n",
    "templates/deployment.yaml": b"# operator\n",
}


def _serve_archive(chart_source: ModuleType, monkeypatch: pytest.MonkeyPatch, files: dict[str, bytes]) -> list[str]:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(f"kuberay-{COMMIT}/helm-chart/kuberay-operator/{name}")
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    fetched: list[str] = []

    def urlopen(url: str, timeout: float) -> io.BytesIO:
        fetched.append(url)
        return io.BytesIO(buffer.getvalue())

    monkeypatch.setattr(chart_source.urllib.request, "urlopen", urlopen)
    return fetched


def _kuberay_event(sha256: str) -> dict[str, Any]:
    return {
        "RequestType": "Create",
        "ResourceProperties": {
            "ClusterName": "mtrl-eks",
            "Region": "us-east-1",
            "Release": OPERATOR_RELEASE,
            "Namespace": OPERATOR_NAMESPACE,
            "ChartRepository": "ray-project/kuberay",
            "ChartRevision": COMMIT,
            "ChartPath": "helm-chart/kuberay-operator",
            "ChartSha256": sha256,
            "ApplyCrds": "true",
            "Values": json.dumps(operator_values("mtrl-verl")),
        },
    }


def _digest(tmp_path: Path, files: dict[str, bytes]) -> str:
    for name, content in files.items():
        (tmp_path / "ref" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "ref" / name).write_bytes(content)
    return tree_sha256(tmp_path / "ref")


@pytest.mark.usefixtures("eks_cluster")
def test_the_operator_chart_is_verified_then_its_crds_applied_then_installed(
    release: ModuleType,
    chart_source: ModuleType,
    helm_calls: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    fetched = _serve_archive(chart_source, monkeypatch, CHART_FILES)
    calls = helm_calls.calls
    physical_id, _ = release.apply(_kuberay_event(_digest(tmp_path, CHART_FILES)), lambda: 900.0)
    assert physical_id == "mtrl-eks/kuberay-system/mtrl-kuberay-operator"
    assert fetched == [f"https://codeload.github.com/ray-project/kuberay/tar.gz/{COMMIT}"]
    assert [(c[0].rsplit("/", 1)[-1], c[1]) for c in calls] == [
        ("kubectl", "apply"),
        ("helm", "status"),
        ("helm", "upgrade"),
    ]
    apply, upgrade = calls[0], calls[-1]
    assert "--server-side" in apply
    assert Path(apply[apply.index("-f") + 1]).name == "crds"
    assert "--skip-crds" in upgrade  # applied above; helm would never upgrade them
    flags = [upgrade[i + 1] for i, arg in enumerate(upgrade) if arg == "--set"]
    assert flags == [
        "image.repository=quay.io/kuberay/operator",
        f"image.tag=v1.7.0@{KUBERAY_OPERATOR_DIGEST}",  # the operator image by digest (issue 36)
        "singleNamespaceInstall=true",
        "watchNamespace[0]=mtrl-verl",
    ]
    assert "--create-namespace" in upgrade  # the operator's own namespace


@pytest.mark.usefixtures("eks_cluster")
def test_a_chart_whose_files_differ_from_the_pin_is_never_installed(
    release: ModuleType,
    chart_source: ModuleType,
    helm_calls: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    pinned = _digest(tmp_path, CHART_FILES)
    _serve_archive(chart_source, monkeypatch, {**CHART_FILES, "templates/extra.yaml": b"kind: ClusterRoleBinding\n"})
    calls = helm_calls.calls
    with pytest.raises(ChartDigestError, match="not the pinned"):
        release.apply(_kuberay_event(pinned), lambda: 900.0)
    assert calls == []


@pytest.mark.usefixtures("eks_cluster")
def test_a_github_directory_without_a_digest_is_refused_before_any_download(
    release: ModuleType, chart_source: ModuleType, helm_calls: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fetched = _serve_archive(chart_source, monkeypatch, CHART_FILES)
    calls = helm_calls.calls
    with pytest.raises(ValueError, match="needs the ChartSha256"):
        release.apply(_kuberay_event(""), lambda: 900.0)
    assert fetched == []
    assert calls == []


def _access_event() -> dict[str, Any]:
    return {
        "RequestType": "Update",
        "ResourceProperties": {
            "ClusterName": "mtrl-eks",
            "Region": "us-east-1",
            "Release": "mtrl-verl-access",
            "Namespace": "kube-system",
            "Manifests": json.dumps(namespace_manifests("mtrl-verl")),
            "Values": "{}",
        },
    }


@pytest.mark.usefixtures("eks_cluster")
def test_the_rbac_release_downloads_nothing(
    release: ModuleType, chart_source: ModuleType, helm_calls: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_network(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("a manifest release must not download anything")

    monkeypatch.setattr(chart_source.urllib.request, "urlopen", no_network)
    calls = helm_calls.calls
    release.apply(_access_event(), lambda: 900.0)
    assert [c[1] for c in calls] == ["status", "upgrade"]
    assert "--skip-crds" not in calls[-1]


def test_real_helm_renders_the_rbac_release_as_exactly_four_namespaced_objects(
    chart_source: ModuleType, commands: ModuleType, real_helm: Path, tmp_path: Path
) -> None:
    chart = chart_source.prepare_chart(_access_event()["ResourceProperties"], tmp_path, lambda _c: "")
    rendered = subprocess.run(
        [str(real_helm), "template", "mtrl-verl-access", str(chart), "--namespace", "kube-system"],
        capture_output=True,
        text=True,
        env=commands.helm_env(tmp_path),
        timeout=120,
        check=False,
    )
    assert rendered.returncode == 0, rendered.stderr
    objects = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    by_kind = {o["kind"]: o for o in objects}
    assert sorted(o["kind"] for o in objects) == ["Namespace", "Role", "RoleBinding"]  # no shared service account
    role, binding = by_kind["Role"], by_kind["RoleBinding"]
    assert role["metadata"] == {**role["metadata"], "name": ROLE_NAME, "namespace": "mtrl-verl"}
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": pipeline_group("mtrl-verl")}
    ]
