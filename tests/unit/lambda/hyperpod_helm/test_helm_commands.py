"""The installer's helm commands (helm_release/commands.py): idempotent installs, flags helm would split, stuck-release
recovery, and the layer's real helm building the pruned chart offline."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pinned_chart import PINNED_REPOSITORIES, PINNED_STYLE_CHART

from mtrl.kube import charts


class FakeHelm:
    """Records helm invocations and answers `helm status` from a canned release state."""

    def __init__(self, status: dict[str, Any] | None) -> None:
        self.status = status
        self.calls: list[list[str]] = []

    def __call__(self, command: Sequence[str]) -> str:
        self.calls.append(list(command))
        if command[1] == "status":
            if self.status is None:
                raise RuntimeError("Error: release: not found")
            return json.dumps(self.status)
        return ""


def test_install_is_upgrade_install(commands: ModuleType) -> None:
    command = commands.upgrade_install_command(
        release="deps",
        namespace="kube-system",
        chart_dir="/tmp/chart",
        values={"b.enabled": False, "a": "x"},
        timeout_s=600,
    )
    assert command[1:4] == ["upgrade", "deps", "/tmp/chart"]
    assert "--install" in command  # a retry after a partial install upgrades instead of failing
    assert "--create-namespace" in command  # the KubeRay operator's own namespace (issue 36)
    assert command[command.index("--timeout") + 1] == "600s"
    assert command[-4:] == ["--set", "a=x", "--set", "b.enabled=false"]


def test_set_flags_refuse_values_helm_would_split(commands: ModuleType) -> None:
    with pytest.raises(ValueError, match="must not contain"):
        commands.set_flags({"region": "us-east-1,evil=true"})


@pytest.mark.parametrize(
    ("status", "expected", "action"),
    [
        (None, None, None),
        ({"info": {"status": "deployed"}, "version": 3}, None, None),
        ({"info": {"status": "failed"}, "version": 2}, None, None),  # upgrade --install repairs it
        ({"info": {"status": "pending-install"}, "version": 1}, "removed", "uninstall"),
        ({"info": {"status": "pending-upgrade"}, "version": 4}, "rolled back", "rollback"),
    ],
)
def test_stuck_release_is_unblocked(
    commands: ModuleType, status: dict[str, Any] | None, expected: str | None, action: str | None
) -> None:
    helm = FakeHelm(status)
    helm_error = commands.HelmError

    def run(command: Sequence[str]) -> str:
        try:
            return helm(command)
        except RuntimeError as error:
            raise helm_error(str(error)) from None

    result = commands.recover_pending_release(run, release="deps", namespace="kube-system")
    assert (result is None) == (expected is None)
    if expected:
        assert expected in result
    verbs = [call[1] for call in helm.calls]
    assert verbs == (["status", action] if action else ["status"])
    if action == "rollback":
        assert helm.calls[1][3] == "3"


# --- the real helm of the deploy-time layer ----------------------------------------------------------


def _local_chart(root: Path, name: str) -> None:
    chart = root / "charts" / name
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(f"apiVersion: v2\nname: {name}\nversion: 0.1.0\n")
    (chart / "templates" / "cm.yaml").write_text(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  release: {{{{ .Release.Name }}}}\n"
    )


def test_real_helm_builds_the_pruned_chart_offline(commands: ModuleType, real_helm: Path, tmp_path: Path) -> None:
    # The pruned Chart.yaml (a JSON flow list) is read by the layer's own helm, and `helm dependency update`
    # then needs no remote repository at all when only file:// components are kept; the unpruned chart cannot
    # be built without reaching quay.io / nvidia.github.io / aws.github.io (no network here).
    chart = tmp_path / "chart"
    chart.mkdir()
    for name in ("training-operators", "health-monitoring-agent", "mlflow"):
        _local_chart(chart, name)
    env = commands.helm_env(tmp_path)
    (chart / "Chart.yaml").write_text(PINNED_STYLE_CHART)

    def helm(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(real_helm), *args], capture_output=True, text=True, env=env, timeout=120, check=False
        )

    (chart / "charts" / "health-monitoring-agent-0.1.0.tgz").write_bytes(b"stale packaged copy")  # as at v3.9.0
    assert helm("dependency", "update", "--skip-refresh", str(chart)).returncode != 0  # unpruned: remote repos
    assert charts.prune_chart(chart, ["training-operators", "health-monitoring-agent"], PINNED_REPOSITORIES) == []
    assert sorted(p.name for p in (chart / "charts").iterdir()) == ["health-monitoring-agent", "training-operators"]
    listed = helm("dependency", "list", str(chart))
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()[1:] if line.strip()]
    names = [row[0] for row in rows if not row[0].endswith(":")]  # helm adds "WARNING: ..." lines
    assert names == ["training-operators", "health-monitoring-agent"]
    built = helm("dependency", "update", "--skip-refresh", str(chart))
    assert built.returncode == 0, built.stderr
    rendered = helm("template", "deps", str(chart), "--set", "trainingOperators.enabled=true")
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stdout.count("name: training-operators") == 1
    assert rendered.stdout.count("name: health-monitoring-agent") == 1
    # helm renders every sub-chart left in charts/, listed or not: a dropped one must be gone from there too
    assert "name: mlflow" not in rendered.stdout
