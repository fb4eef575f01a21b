"""Chart sources of the deploy-time installer: the files digest, the extraction of one directory of an archive, and
the chart made from objects rendered at synth."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mtrl.kube.charts import (
    ChartDigestError,
    archive_url,
    extract_chart_dir,
    manifest_chart,
    tree_sha256,
    verify_tree,
)


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return root


def _archive(path: Path, files: dict[str, bytes]) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    path.write_bytes(buffer.getvalue())
    return path


def test_the_digest_is_of_paths_and_contents_not_of_timestamps_or_order(tmp_path: Path) -> None:
    one = _tree(tmp_path / "one", {"Chart.yaml": b"name: x\n", "crds/a.yaml": b"a\n", "templates/b.yaml": b"b\n"})
    two = _tree(tmp_path / "two", {"templates/b.yaml": b"b\n", "crds/a.yaml": b"a\n", "Chart.yaml": b"name: x\n"})
    os.utime(two / "crds" / "a.yaml", (0, 0))
    assert tree_sha256(one) == tree_sha256(two)
    (two / "crds" / "a.yaml").write_bytes(b"a \n")  # one byte more
    assert tree_sha256(one) != tree_sha256(two)
    moved = _tree(tmp_path / "moved", {"Chart.yaml": b"name: x\n", "crds/b.yaml": b"a\n", "templates/b.yaml": b"b\n"})
    assert tree_sha256(one) != tree_sha256(moved)  # same bytes under another name
    extra = _tree(tmp_path / "extra", {"Chart.yaml": b"name: x\n", "crds/a.yaml": b"a\n", "templates/b.yaml": b"b\n"})
    (extra / "templates" / "c.yaml").write_bytes(b"")
    assert tree_sha256(one) != tree_sha256(extra)  # an added empty file


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=64), st.binary(max_size=64))
def test_no_two_different_pairs_of_files_share_a_digest(first: bytes, second: bytes) -> None:
    # Path and content are separated so "a"+"bc" and "ab"+"c" cannot collide.
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        left = _tree(Path(tmp) / "l", {"a": first, "b": second})
        right = _tree(Path(tmp) / "r", {"a": first + second, "b": b""})
        assert (tree_sha256(left) == tree_sha256(right)) == (second == b"")


def test_a_wrong_digest_or_a_symlink_is_refused(tmp_path: Path) -> None:
    chart = _tree(tmp_path / "c", {"Chart.yaml": b"name: x\n"})
    verify_tree(chart, tree_sha256(chart))
    with pytest.raises(ChartDigestError, match="not the pinned"):
        verify_tree(chart, "0" * 64)
    with pytest.raises(ValueError, match="64 lowercase hex"):
        verify_tree(chart, "sha256:abc")
    (chart / "link").symlink_to("/etc/passwd")
    with pytest.raises(ChartDigestError, match="not a regular file"):
        tree_sha256(chart)


def test_only_the_pinned_directory_of_the_archive_is_extracted(tmp_path: Path) -> None:
    archive = _archive(
        tmp_path / "repo.tar.gz",
        {
            "kuberay-abc/helm-chart/kuberay-operator/Chart.yaml": b"name: kuberay-operator\n",
            "kuberay-abc/helm-chart/kuberay-operator/crds/ray.io_rayjobs.yaml": b"kind: CustomResourceDefinition\n",
            "kuberay-abc/helm-chart/kuberay-apiserver/Chart.yaml": b"name: other\n",
            "kuberay-abc/ray-operator/main.go": b"package main\n",
        },
    )
    chart = extract_chart_dir(archive, tmp_path, "helm-chart/kuberay-operator")
    assert sorted(p.relative_to(chart).as_posix() for p in chart.rglob("*") if p.is_file()) == [
        "Chart.yaml",
        "crds/ray.io_rayjobs.yaml",
    ]
    with pytest.raises(ValueError, match="has no helm-chart/missing/"):
        extract_chart_dir(archive, tmp_path / "x", "helm-chart/missing")
    for hostile in ("../etc", "/abs", "helm-chart/../..", ""):
        with pytest.raises(ValueError, match="relative directory"):
            extract_chart_dir(archive, tmp_path / "y", hostile)


def test_an_escaping_member_is_refused(tmp_path: Path) -> None:
    archive = _archive(
        tmp_path / "evil.tar.gz",
        {
            "top/chart/Chart.yaml": b"name: x\n",
            "top/chart/../../../../escape.txt": b"x",
        },
    )
    with pytest.raises(tarfile.OutsideDestinationError):
        extract_chart_dir(archive, tmp_path / "out", "chart")
    assert not (tmp_path.parent / "escape.txt").exists()


@pytest.mark.parametrize("commit", ["main", "v1.7.0", "59d663ae", "0" * 39 + "G"])
def test_the_archive_is_of_a_full_commit_only(commit: str) -> None:
    with pytest.raises(ValueError, match="40-character commit"):
        archive_url("ray-project/kuberay", commit)
    assert (
        archive_url("ray-project/kuberay", "a" * 40)
        == f"https://codeload.github.com/ray-project/kuberay/tar.gz/{'a' * 40}"
    )


def test_a_manifest_chart_holds_exactly_the_objects(tmp_path: Path) -> None:
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "mtrl-verl"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"}, "rules": []},
    ]
    chart = manifest_chart(tmp_path, name="mtrl-verl-access", version="1.0.0", objects=objects)
    assert json.loads((chart / "Chart.yaml").read_text()) == {
        "apiVersion": "v2",
        "name": "mtrl-verl-access",
        "version": "1.0.0",
    }
    written = [json.loads(p.read_text()) for p in sorted((chart / "templates").iterdir())]
    assert written == objects


@pytest.mark.parametrize(
    ("objects", "message"),
    [
        ([], "at least one object"),
        ([{"kind": "Namespace"}], "not a Kubernetes object"),
        ([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "{{ .Values.x }}"}}], "template delimiters"),
    ],
)
def test_a_manifest_chart_refuses_what_helm_would_misread(
    tmp_path: Path, objects: list[dict[str, object]], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        manifest_chart(tmp_path, name="x", version="1.0.0", objects=objects)
