"""The chart the installer installs (helm_release/chart_source.py, mtrl.kube.charts): only the chart directory is
extracted, branches are refused, and the pinned chart keeps only the dependencies it needs."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from types import ModuleType

import pytest
from pinned_chart import PINNED_STYLE_CHART, REQUIRED

from mtrl.kube import charts


def _tarball(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_only_the_chart_directory_is_extracted(chart_source: ModuleType, tmp_path: Path) -> None:
    archive = tmp_path / "repo.tar.gz"
    archive.write_bytes(
        _tarball(
            {
                "repo-abc/helm_chart/HyperPodHelmChart/Chart.yaml": b"name: hyperpod\n",
                "repo-abc/helm_chart/HyperPodHelmChart/charts/agent/values.yaml": b"a: 1\n",
                "repo-abc/src/cli.py": b"print('not part of the chart')\n",
                "repo-abc/helm_chart/HyperPodHelmChart/../../../../escape.txt": b"x",
            }
        )
    )
    with pytest.raises(tarfile.OutsideDestinationError):
        chart_source.extract_chart(archive, tmp_path)
    assert not (tmp_path.parent / "escape.txt").exists()

    clean = tmp_path / "clean.tar.gz"
    clean.write_bytes(
        _tarball(
            {
                "repo-abc/helm_chart/HyperPodHelmChart/Chart.yaml": b"name: hyperpod\n",
                "repo-abc/helm_chart/HyperPodHelmChart/charts/agent/values.yaml": b"a: 1\n",
                "repo-abc/src/cli.py": b"print('not part of the chart')\n",
            }
        )
    )
    out = tmp_path / "out"
    out.mkdir()
    chart_source.extract_chart(clean, out)
    files = sorted(str(p.relative_to(out / "chart")) for p in (out / "chart").rglob("*") if p.is_file())
    assert files == ["Chart.yaml", "charts/agent/values.yaml"]


def test_chart_fetch_refuses_branches(chart_source: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="40-character commit"):
        chart_source.fetch_chart("aws/sagemaker-hyperpod-cli", "main", tmp_path)


def test_only_the_needed_dependencies_stay_in_the_chart() -> None:
    # Defect 1: `helm dependency update` fetches every dependency Chart.yaml lists, disabled ones too.
    text, repositories = charts.prune_dependencies(PINNED_STYLE_CHART, REQUIRED)
    before, entries, _after = charts.chart_dependencies(text)
    assert sorted(e["name"] for e in entries) == REQUIRED
    assert "cert-manager" not in text
    assert "mlflow" not in text
    assert {"name": "nvidia-device-plugin", "version": "0.16.1"}.items() <= entries[1].items()
    assert before[:2] == ["apiVersion: v2", "name: hyperpod-helm-chart"]
    assert charts.prune_dependencies(text, REQUIRED)[0] == text  # pruning a pruned chart changes nothing
    assert repositories == ["https://aws.github.io/eks-charts", "https://nvidia.github.io/k8s-device-plugin"]


def test_pruned_chart_is_yaml_helm_reads() -> None:
    yaml = pytest.importorskip("yaml")
    text, _ = charts.prune_dependencies(PINNED_STYLE_CHART, ["training-operators"])
    chart = yaml.safe_load(text)
    assert chart["name"] == "hyperpod-helm-chart"
    assert chart["dependencies"] == [
        {
            "name": "training-operators",
            "version": "0.1.0",
            "repository": "file://charts/training-operators",
            "condition": "trainingOperators.enabled",
        }
    ]


def test_a_pin_without_a_wanted_dependency_fails_loudly() -> None:
    with pytest.raises(ValueError, match=r"no dependencies named \['kuberay-operator'\]"):
        charts.prune_dependencies(PINNED_STYLE_CHART, ["kuberay-operator"])
    with pytest.raises(ValueError, match="unexpected line"):
        charts.prune_dependencies(PINNED_STYLE_CHART.replace("    condition: mlflow.enabled", "    tags: [x]"), [])
    with pytest.raises(ValueError, match="no \\(or more than one\\)"):
        charts.prune_dependencies("name: x\n", [])
