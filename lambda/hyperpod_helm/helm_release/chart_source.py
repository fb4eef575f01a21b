"""Where a release's chart comes from: a pinned commit (never a branch), verified by digest, or objects rendered
at synth (``prepare_chart``)."""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from helm_release.commands import HELM, Runner

# The shared mtrl package is staged next to the handler (stacks/constructs/python_function.py).
from mtrl.kube.charts import archive_url, extract_chart_dir, manifest_chart, prune_chart, verify_tree

CHART_PATH_IN_REPO = "helm_chart/HyperPodHelmChart"


def fetch_chart(
    repository: str, revision: str, workdir: Path, *, chart_path: str = CHART_PATH_IN_REPO, sha256: str | None = None
) -> Path:
    """Download the chart directory of one pinned commit (a tarball of that commit, nothing else); with ``sha256``,
    refuse it unless its files hash to that digest (mtrl.kube.charts.tree_sha256)."""
    url = archive_url(repository, revision)
    archive = workdir / "chart.tar.gz"
    with urllib.request.urlopen(url, timeout=120) as response, archive.open("wb") as out:  # noqa: S310 - https, pinned
        shutil.copyfileobj(response, out)
    chart = extract_chart(archive, workdir, chart_path)
    if sha256 is not None:
        verify_tree(chart, sha256)
    return chart


def extract_chart(archive: Path, workdir: Path, chart_path: str = CHART_PATH_IN_REPO) -> Path:
    """Extract only ``<top>/<chart_path>/**`` into ``workdir/chart`` (no path escapes)."""
    return extract_chart_dir(archive, workdir, chart_path)


def prepare_chart(props: Mapping[str, Any], workdir: Path, run: Runner) -> Path:
    """The release's chart, from one of three pinned sources: Kubernetes objects rendered at synth (``Manifests``,
    nothing downloaded); a directory of a GitHub commit verified by its files' digest (``ChartPath`` + ``ChartSha256``);
    or the HyperPod chart at a commit, verified by its files' digest (``ChartSha256``), its sub-charts pruned to
    ``Dependencies`` and fetched at the versions it pins from the repositories pinned in code
    (``DependencyRepositories``)."""
    if "Manifests" in props:
        objects = json.loads(props["Manifests"])
        return manifest_chart(
            workdir, name=props["Release"], version=props.get("ChartVersion", "1.0.0"), objects=objects
        )
    if "ChartPath" in props:
        if not props.get("ChartSha256"):
            raise ValueError("a ChartPath release needs the ChartSha256 of its files (pinned in code)")
        return fetch_chart(
            props["ChartRepository"],
            props["ChartRevision"],
            workdir,
            chart_path=props["ChartPath"],
            sha256=props["ChartSha256"],
        )
    if not props.get("ChartSha256") or not props.get("DependencyRepositories"):
        raise ValueError("the HyperPod chart needs the ChartSha256 of its files and its DependencyRepositories")
    chart_dir = fetch_chart(props["ChartRepository"], props["ChartRevision"], workdir, sha256=props["ChartSha256"])
    # Only the sub-charts this deployment installs, at the versions the verified Chart.yaml names, from the
    # repositories pinned in code (never URLs read from the download); helm must know the https ones first.
    pinned = json.loads(props["DependencyRepositories"])
    for index, url in enumerate(prune_chart(chart_dir, json.loads(props["Dependencies"]), pinned)):
        run([HELM, "repo", "add", f"dep{index}", url, "--force-update"])
    run([HELM, "dependency", "update", "--skip-refresh", str(chart_dir)])
    return chart_dir
