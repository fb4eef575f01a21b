"""The chart the installer installs (helm_release/chart_source.py, mtrl.kube.charts): only the chart directory is
extracted, branches are refused, and the pinned chart keeps only the dependencies it needs."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from types import ModuleType

import pytest
from pinned_chart import PINNED_REPOSITORIES, PINNED_STYLE_CHART, REQUIRED

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
    text, repositories = charts.prune_dependencies(PINNED_STYLE_CHART, REQUIRED, PINNED_REPOSITORIES)
    before, entries, _after = charts.chart_dependencies(text)
    assert sorted(e["name"] for e in entries) == REQUIRED
    assert "cert-manager" not in text
    assert "mlflow" not in text
    assert {"name": "nvidia-device-plugin", "version": "0.16.1"}.items() <= entries[1].items()
    assert before[:2] == ["apiVersion: v2", "name: hyperpod-helm-chart"]
    assert (
        charts.prune_dependencies(text, REQUIRED, PINNED_REPOSITORIES)[0] == text
    )  # pruning a pruned chart changes nothing
    assert repositories == ["https://aws.github.io/eks-charts", "https://nvidia.github.io/k8s-device-plugin"]


def test_pruned_chart_is_yaml_helm_reads() -> None:
    yaml = pytest.importorskip("yaml")
    text, _ = charts.prune_dependencies(PINNED_STYLE_CHART, ["training-operators"], PINNED_REPOSITORIES)
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
        charts.prune_dependencies(PINNED_STYLE_CHART, ["kuberay-operator"], PINNED_REPOSITORIES)
    with pytest.raises(ValueError, match="unexpected line"):
        charts.prune_dependencies(
            PINNED_STYLE_CHART.replace("    condition: mlflow.enabled", "    tags: [x]"), [], PINNED_REPOSITORIES
        )
    with pytest.raises(ValueError, match="no \\(or more than one\\)"):
        charts.prune_dependencies("name: x\n", [], PINNED_REPOSITORIES)


# --- the HyperPod chart is pinned by its files' digest, its dependency repositories by code (issue 38 item 7) -----


@pytest.mark.parametrize(
    ("dependency", "planted"),
    [
        ("nvidia-device-plugin", "https://attacker.example/charts"),
        ("aws-efa-k8s-device-plugin", "https://aws.github.io/eks-charts.attacker.example"),
        ("nvidia-device-plugin", "oci://attacker.example/charts"),
        ("training-operators", "file://charts/../../../etc"),  # a local sub-chart that escapes charts/
        ("health-monitoring-agent", "https://attacker.example/hma"),  # a local one turned remote
    ],
)
def test_a_chart_yaml_naming_another_repository_for_a_kept_dependency_is_refused(
    dependency: str, planted: str, tmp_path: Path
) -> None:
    before, entries, after = charts.chart_dependencies(PINNED_STYLE_CHART)
    for entry in entries:
        if entry["name"] == dependency:
            entry["repository"] = planted
    tampered = "\n".join([*before, "dependencies:", *_block(entries), *after]) + "\n"
    with pytest.raises(ValueError, match=f"takes dependency '{dependency}' from .*not from the repository pinned"):
        charts.prune_dependencies(tampered, REQUIRED, PINNED_REPOSITORIES)
    chart = tmp_path / "chart"
    chart.mkdir()
    (chart / "Chart.yaml").write_text(tampered)
    with pytest.raises(ValueError, match="not from the repository pinned"):
        charts.prune_chart(chart, REQUIRED, PINNED_REPOSITORIES)
    assert (chart / "Chart.yaml").read_text() == tampered  # refused before anything was changed


def _block(entries: list[dict[str, str]]) -> list[str]:
    lines = []
    for entry in entries:
        first, *rest = entry.items()
        lines.append(f"  - {first[0]}: {first[1]}")
        lines += [f"    {key}: {value}" for key, value in rest]
    return lines


def test_the_repositories_helm_adds_are_the_pinned_ones_not_the_downloaded_text() -> None:
    # The downloaded text may differ in form only (a trailing slash): helm still gets the pinned URL.
    _, repositories = charts.prune_dependencies(PINNED_STYLE_CHART, REQUIRED, PINNED_REPOSITORIES)
    assert repositories == sorted(PINNED_REPOSITORIES[name] for name in REQUIRED if name in PINNED_REPOSITORIES)


def _hyperpod_archive(files: dict[str, bytes]) -> bytes:
    top = "sagemaker-hyperpod-cli-" + "0" * 40
    return _tarball({f"{top}/helm_chart/HyperPodHelmChart/{name}": data for name, data in files.items()})


@pytest.mark.parametrize(
    "tamper",
    [
        {"templates/extra.yaml": b"kind: ClusterRoleBinding\n"},  # a file added
        {"Chart.yaml": PINNED_STYLE_CHART.replace("0.16.1", "0.16.2").encode()},  # a dependency's version changed
        {"charts/health-monitoring-agent/values.yaml": b"image: attacker.example/agent\n"},  # a sub-chart changed
    ],
    ids=["file added", "version changed", "sub-chart changed"],
)
def test_the_hyperpod_chart_whose_files_differ_from_the_pin_is_never_installed(
    chart_source: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tamper: dict[str, bytes]
) -> None:
    pinned_files = {
        "Chart.yaml": PINNED_STYLE_CHART.encode(),
        "charts/health-monitoring-agent/values.yaml": b"image: public.ecr.aws/agent\n",
        "charts/training-operators/Chart.yaml": b"name: training-operators\n",
    }
    reference = tmp_path / "reference"
    for name, data in pinned_files.items():
        (reference / name).parent.mkdir(parents=True, exist_ok=True)
        (reference / name).write_bytes(data)
    digest = charts.tree_sha256(reference)
    served = _hyperpod_archive({**pinned_files, **tamper})
    monkeypatch.setattr(chart_source.urllib.request, "urlopen", lambda url, timeout: io.BytesIO(served))
    ran: list[list[str]] = []
    props = {
        "ChartRepository": "aws/sagemaker-hyperpod-cli",
        "ChartRevision": "0" * 40,
        "ChartSha256": digest,
        "DependencyRepositories": json.dumps(PINNED_REPOSITORIES),
        "Dependencies": json.dumps(REQUIRED),
    }
    workdir = tmp_path / "work"
    workdir.mkdir()
    with pytest.raises(charts.ChartDigestError, match="not the pinned"):
        chart_source.prepare_chart(props, workdir, ran.append)
    assert ran == []  # no helm repo add, no dependency update
    # The untampered archive passes the same check and goes on to helm.
    monkeypatch.setattr(
        chart_source.urllib.request, "urlopen", lambda url, timeout: io.BytesIO(_hyperpod_archive(pinned_files))
    )
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    chart_source.prepare_chart(props, fresh, ran.append)
    assert [command[1:5] for command in ran][:2] == [
        ["repo", "add", "dep0", "https://aws.github.io/eks-charts"],
        ["repo", "add", "dep1", "https://nvidia.github.io/k8s-device-plugin"],
    ]


@pytest.mark.parametrize("missing", ["ChartSha256", "DependencyRepositories"])
def test_the_hyperpod_chart_without_its_pins_is_refused_before_any_download(
    chart_source: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, missing: str
) -> None:
    monkeypatch.setattr(chart_source.urllib.request, "urlopen", lambda url, timeout: pytest.fail("downloaded"))
    props = {
        "ChartRepository": "aws/sagemaker-hyperpod-cli",
        "ChartRevision": "0" * 40,
        "ChartSha256": "a" * 64,
        "DependencyRepositories": json.dumps(PINNED_REPOSITORIES),
        "Dependencies": json.dumps(REQUIRED),
    }
    del props[missing]
    with pytest.raises(ValueError, match="needs the ChartSha256 of its files and its DependencyRepositories"):
        chart_source.prepare_chart(props, tmp_path, lambda command: pytest.fail("ran helm"))
