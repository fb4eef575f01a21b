"""Helm charts the deploy-time installer (lambda/hyperpod_helm) installs, each from a pinned, verified source.

Two kinds of source:

- a directory of a GitHub repository at a full commit (the archive codeload.github.com serves for it), optionally
  verified by ``tree_sha256`` of the extracted directory, a digest pinned in code next to the commit. The digest is of
  the files, not of the archive: GitHub does not promise byte-stable archives, but the files of a commit are fixed;
- a chart made here from Kubernetes objects rendered at synth (``manifest_chart``): nothing is downloaded.

Standard library only (the installer carries no other dependency).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_CHART_PATH = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,51}[a-z0-9])?$")


class ChartDigestError(ValueError):
    """The downloaded chart is not the pinned one."""


def archive_url(repository: str, commit: str) -> str:
    """The tarball of exactly one commit (never a branch or a tag, which can move)."""
    if not _REPO.match(repository) or not _COMMIT.match(commit):
        raise ValueError("ChartRepository must be 'owner/name' and ChartRevision a full 40-character commit")
    return f"https://codeload.github.com/{repository}/tar.gz/{commit}"


def extract_chart_dir(archive: Path, workdir: Path, chart_path: str) -> Path:
    """Extract only ``<top>/<chart_path>/**`` of a repository archive into ``workdir/chart`` (no path escapes)."""
    if not _CHART_PATH.match(chart_path) or ".." in chart_path.split("/"):
        raise ValueError(f"ChartPath {chart_path!r} must be a relative directory of the repository")
    target = workdir / "chart"
    with tarfile.open(archive, "r:gz") as tar:
        members = []
        for member in tar.getmembers():
            parts = member.name.split("/", 1)
            if len(parts) != 2 or not parts[1].startswith(chart_path + "/"):
                continue
            member.name = parts[1][len(chart_path) + 1 :]
            if member.name:
                members.append(member)
        if not members:
            raise ValueError(f"the archive has no {chart_path}/ directory")
        tar.extractall(target, members=members, filter="data")
    return target


def tree_sha256(directory: Path) -> str:
    """SHA-256 over every regular file under ``directory``: its relative POSIX path and the SHA-256 of its bytes, one
    ``<path>\\0<hex>\\n`` line per file in path order. Symbolic links and special files are refused."""
    digest = hashlib.sha256()
    for path in sorted(directory.rglob("*"), key=lambda p: p.relative_to(directory).as_posix()):
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise ChartDigestError(f"{path.relative_to(directory)}: not a regular file or directory")
        if path.is_file():
            content = hashlib.sha256(path.read_bytes()).hexdigest()
            digest.update(f"{path.relative_to(directory).as_posix()}\0{content}\n".encode())
    return digest.hexdigest()


def verify_tree(directory: Path, expected_sha256: str) -> None:
    if not _SHA256.match(expected_sha256):
        raise ValueError("ChartSha256 must be 64 lowercase hex characters")
    actual = tree_sha256(directory)
    if actual != expected_sha256:
        raise ChartDigestError(
            f"the downloaded chart's files hash to {actual}, not the pinned {expected_sha256}: refusing to install it"
        )


# --- pruning a chart's dependencies (the HyperPod chart) ------------------------------------------------

_DEPENDENCY_KEYS = ("name", "version", "repository", "condition", "alias")


def chart_dependencies(chart_yaml: str) -> tuple[list[str], list[dict[str, str]], list[str]]:
    """Split a Chart.yaml into (lines before ``dependencies:``, the dependency entries, lines after).

    The chart's dependency list is a flat list of ``key: value`` maps; anything else is refused rather than
    guessed at, so a changed pin fails the deploy loudly instead of installing something unexpected.
    """
    lines = chart_yaml.splitlines()
    starts = [i for i, line in enumerate(lines) if re.match(r"^dependencies:(\s|$)", line)]
    if len(starts) != 1:
        raise ValueError("Chart.yaml has no (or more than one) top-level 'dependencies:' list")
    start = starts[0]
    inline = lines[start][len("dependencies:") :].strip()
    if inline:  # the flow form prune_dependencies writes (JSON)
        parsed = json.loads(inline)
        if not isinstance(parsed, list) or not all(isinstance(entry, dict) for entry in parsed):
            raise ValueError("Chart.yaml dependencies must be a list of maps")
        return lines[:start], [{str(k): str(v) for k, v in entry.items()} for entry in parsed], lines[start + 1 :]
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i] and not lines[i][0].isspace() and lines[i][0] != "-"),
        len(lines),
    )
    entries: list[dict[str, str]] = []
    for line in lines[start + 1 : end]:
        if not line.strip() or line.strip().startswith("#"):
            continue
        match = re.match(r"^\s*(-\s+)?([A-Za-z]+):\s*(.*?)\s*$", line)
        if not match or match.group(2) not in _DEPENDENCY_KEYS:
            raise ValueError(f"unexpected line in Chart.yaml dependencies: {line.strip()!r}")
        if match.group(1):
            entries.append({})
        elif not entries:
            raise ValueError(f"Chart.yaml dependency line outside an entry: {line.strip()!r}")
        entries[-1][match.group(2)] = match.group(3).strip("\"'")
    return lines[:start], entries, lines[end:]


def prune_dependencies(chart_yaml: str, keep: Sequence[str], repositories: Mapping[str, str]) -> tuple[str, list[str]]:
    """Chart.yaml with only the ``keep`` dependencies, and the http(s) repositories helm must know for them.

    ``repositories`` (dependency name → repository URL) is the pin in code: every kept dependency that is not a
    ``file://charts/`` sub-chart must be in it with the same URL, and the repositories returned are the pinned ones,
    never text taken from the downloaded Chart.yaml. A name in ``keep`` that the chart does not have is an error
    (the pinned commit and the settings disagree).
    """
    before, entries, after = chart_dependencies(chart_yaml)
    names = [entry.get("name", "") for entry in entries]
    missing = sorted(set(keep) - set(names))
    if missing:
        raise ValueError(f"the pinned chart has no dependencies named {missing} (it has {sorted(names)})")
    kept = [entry for entry in entries if entry.get("name") in set(keep)]
    remote: list[str] = []
    for entry in kept:
        name, named = entry.get("name", ""), entry.get("repository", "").rstrip("/")
        if named.startswith("file://charts/") and ".." not in named.split("/"):
            continue
        pinned = repositories.get(name, "").rstrip("/")
        if not pinned or named != pinned:
            raise ValueError(
                f"Chart.yaml takes dependency {name!r} from {named[:200]!r}, not from the repository pinned for it "
                f"({pinned or 'none'}): refusing to install it"
            )
        if pinned.startswith("https://"):  # oci:// references need no helm repository
            remote.append(pinned)
    # JSON is YAML: the kept list is written as one flow sequence, exactly as parsed.
    text = "\n".join([*before, "dependencies: " + json.dumps(kept), *after]) + "\n"
    return text, sorted(set(remote))


def prune_chart(chart_dir: Path, keep: Sequence[str], repositories: Mapping[str, str]) -> list[str]:
    """Keep only the ``keep`` dependencies: in Chart.yaml, and in charts/, where helm renders every sub-chart it
    finds whether Chart.yaml lists it or not. Returns the pinned https repositories the kept ones come from."""
    chart_yaml = chart_dir / "Chart.yaml"
    text, remote = prune_dependencies(chart_yaml.read_text(), keep, repositories)
    chart_yaml.write_text(text)
    _, kept, _ = chart_dependencies(text)
    local = {
        entry["repository"].removeprefix("file://").removeprefix("charts/").strip("/")
        for entry in kept
        if entry.get("repository", "").startswith("file://charts/")
    }
    charts = chart_dir / "charts"
    if charts.is_dir():
        for path in charts.iterdir():
            if path.name not in local:  # a dropped component, or a stale packaged copy helm would also render
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()
    return remote


def manifest_chart(workdir: Path, *, name: str, version: str, objects: Sequence[Mapping[str, Any]]) -> Path:
    """A chart whose templates are exactly ``objects`` (rendered at synth): one JSON file per object.

    Helm reads every template as a Go template, so text that would be one (``{{``) is refused rather than rendered.
    """
    if not _NAME.match(name):
        raise ValueError(f"chart name {name!r} must be a DNS label")
    if not objects:
        raise ValueError("a manifest chart needs at least one object")
    chart = workdir / "chart"
    templates = chart / "templates"
    templates.mkdir(parents=True)
    (chart / "Chart.yaml").write_text(json.dumps({"apiVersion": "v2", "name": name, "version": version}) + "\n")
    for index, obj in enumerate(objects):
        if not isinstance(obj, Mapping) or not {"apiVersion", "kind", "metadata"} <= set(obj):
            raise ValueError(f"manifest {index} is not a Kubernetes object (apiVersion, kind, metadata)")
        text = json.dumps(obj, sort_keys=True)
        if "{{" in text:
            raise ValueError(f"manifest {index} ({obj['kind']}) contains template delimiters")
        (templates / f"{index:02d}-{str(obj['kind']).lower()}.json").write_text(text + "\n")
    return chart
