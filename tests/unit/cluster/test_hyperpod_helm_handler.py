"""The deploy-time Helm installer: idempotent commands, stuck-release recovery, safe chart extraction,
EKS token shape, and exactly one CloudFormation response on every path."""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import tarfile
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
from moto import mock_aws

HANDLER = Path(__file__).resolve().parents[3] / "lambda" / "hyperpod_helm" / "handler.py"


@pytest.fixture(scope="module")
def handler() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hyperpod_helm_handler", HANDLER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)


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


def test_install_is_upgrade_install(handler: ModuleType) -> None:
    command = handler.upgrade_install_command(
        release="deps",
        namespace="kube-system",
        chart_dir="/tmp/chart",
        values={"b.enabled": False, "a": "x"},
        timeout_s=600,
    )
    assert command[1:4] == ["upgrade", "deps", "/tmp/chart"]
    assert "--install" in command  # a retry after a partial install upgrades instead of failing
    assert command[command.index("--timeout") + 1] == "600s"
    assert command[-4:] == ["--set", "a=x", "--set", "b.enabled=false"]


def test_set_flags_refuse_values_helm_would_split(handler: ModuleType) -> None:
    with pytest.raises(ValueError, match="must not contain"):
        handler.set_flags({"region": "us-east-1,evil=true"})


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
    handler: ModuleType, status: dict[str, Any] | None, expected: str | None, action: str | None
) -> None:
    helm = FakeHelm(status)
    helm_error = handler.HelmError

    def run(command: Sequence[str]) -> str:
        try:
            return helm(command)
        except RuntimeError as error:
            raise helm_error(str(error)) from None

    result = handler.recover_pending_release(run, release="deps", namespace="kube-system")
    assert (result is None) == (expected is None)
    if expected:
        assert expected in result
    verbs = [call[1] for call in helm.calls]
    assert verbs == (["status", action] if action else ["status"])
    if action == "rollback":
        assert helm.calls[1][3] == "3"


def _tarball(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_only_the_chart_directory_is_extracted(handler: ModuleType, tmp_path: Path) -> None:
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
        handler.extract_chart(archive, tmp_path)
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
    handler.extract_chart(clean, out)
    files = sorted(str(p.relative_to(out / "chart")) for p in (out / "chart").rglob("*") if p.is_file())
    assert files == ["Chart.yaml", "charts/agent/values.yaml"]


def test_chart_fetch_refuses_branches(handler: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="40-character commit"):
        handler.fetch_chart("aws/sagemaker-hyperpod-cli", "main", tmp_path)


def test_chart_repositories_needing_repo_add(handler: ModuleType) -> None:
    chart = """dependencies:
  - name: training-operators
    repository: "file://charts/training-operators"
  - name: nvidia-device-plugin
    repository: https://nvidia.github.io/k8s-device-plugin
  - name: aws-efa-k8s-device-plugin
    repository: https://aws.github.io/eks-charts/
  - name: cert-manager
    repository: oci://quay.io/jetstack/charts
"""
    assert handler.chart_repositories(chart) == [
        "https://aws.github.io/eks-charts",
        "https://nvidia.github.io/k8s-device-plugin",
    ]


def test_eks_token_is_a_presigned_get_caller_identity_bound_to_the_cluster(handler: ModuleType, aws_env: None) -> None:
    token = handler.eks_token("mtrl-eks", "us-east-1")
    prefix = "k8s-aws-v1."
    assert token.startswith(prefix)
    body = token[len(prefix) :]
    url = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()
    query = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)
    assert url.startswith("https://sts.us-east-1.amazonaws.com/")
    assert query["Action"] == ["GetCallerIdentity"]
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"][0]
    assert query["X-Amz-Expires"] == ["60"]


class _Context:
    def get_remaining_time_in_millis(self) -> int:
        return 900_000


def _event(request_type: str, **extra: Any) -> dict[str, Any]:
    return {
        "RequestType": request_type,
        "ResponseURL": "https://cloudformation-custom-resource-response.example/abc",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/mtrl-cluster/1",
        "RequestId": "req-1",
        "LogicalResourceId": "HyperPodDependenciesRelease",
        "ResourceProperties": {
            "ClusterName": "mtrl-eks",
            "Region": "us-east-1",
            "Release": "hyperpod-dependencies",
            "Namespace": "kube-system",
            "ChartRepository": "aws/sagemaker-hyperpod-cli",
            "ChartRevision": "0" * 40,
            "Values": "{}",
        },
        **extra,
    }


@pytest.fixture
def responses(handler: ModuleType, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    class _Response:
        status = 200

        def __enter__(self) -> _Response:
            return self

        def __exit__(self, *args: object) -> None:
            return None

    def urlopen(request: Any, timeout: float) -> _Response:
        assert request.get_method() == "PUT"
        sent.append(json.loads(request.data))
        return _Response()

    monkeypatch.setattr(handler.urllib.request, "urlopen", urlopen)
    return sent


def test_a_failure_is_reported_once_as_failed(
    handler: ModuleType, responses: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(event: Any, remaining: Any) -> None:
        raise RuntimeError("helm exploded")

    monkeypatch.setattr(handler, "apply", broken)
    handler.handler(_event("Create"), _Context())
    assert len(responses) == 1
    assert responses[0]["Status"] == "FAILED"
    assert "helm exploded" in responses[0]["Reason"]


def test_success_reports_a_stable_physical_id(
    handler: ModuleType, responses: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(handler, "apply", lambda event, remaining: ("mtrl-eks/kube-system/deps", {"Release": "deps"}))
    handler.handler(_event("Update", PhysicalResourceId="mtrl-eks/kube-system/deps"), _Context())
    assert [r["Status"] for r in responses] == ["SUCCESS"]
    assert responses[0]["PhysicalResourceId"] == "mtrl-eks/kube-system/deps"


@mock_aws
def test_delete_succeeds_when_the_cluster_is_already_gone(handler: ModuleType, aws_env: None) -> None:
    event = _event("Delete", PhysicalResourceId="mtrl-eks/kube-system/hyperpod-dependencies")
    assert boto3.client("eks", region_name="us-east-1").list_clusters()["clusters"] == []
    physical_id, data = handler.apply(event, lambda: 900.0)
    assert physical_id == "mtrl-eks/kube-system/hyperpod-dependencies"
    assert data == {}


@mock_aws
def test_create_fails_when_the_cluster_does_not_exist(handler: ModuleType, aws_env: None) -> None:
    with pytest.raises(Exception, match=r"ResourceNotFound|No cluster found"):
        handler.apply(_event("Create"), lambda: 900.0)


class _Completed:
    def __init__(self, returncode: int, stdout: str = "", stderr: str = "") -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.mark.parametrize("release_state", [None, "pending-install"])
@mock_aws
def test_create_runs_the_full_idempotent_sequence(
    handler: ModuleType, aws_env: None, monkeypatch: pytest.MonkeyPatch, release_state: str | None
) -> None:
    eks = boto3.client("eks", region_name="us-east-1")
    eks.create_cluster(
        name="mtrl-eks",
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": ["subnet-1", "subnet-2"]},
    )
    calls: list[list[str]] = []

    def fake_fetch(repository: str, revision: str, workdir: Path) -> Path:
        chart = workdir / "chart"
        chart.mkdir()
        (chart / "Chart.yaml").write_text("dependencies:\n  - repository: https://aws.github.io/eks-charts/\n")
        return chart

    def fake_run(args: list[str], **kwargs: Any) -> _Completed:
        calls.append(args)
        assert kwargs["timeout"] > 0
        if args[1] == "status":
            if release_state is None:
                return _Completed(1, stderr="Error: release: not found")
            return _Completed(0, stdout=json.dumps({"info": {"status": release_state}, "version": 1}))
        return _Completed(0)

    monkeypatch.setattr(handler, "fetch_chart", fake_fetch)
    monkeypatch.setattr(handler.subprocess, "run", fake_run)
    event = _event("Create")
    event["ResourceProperties"]["Values"] = json.dumps({"trainingOperators.enabled": True})
    physical_id, data = handler.apply(event, lambda: 900.0)

    assert physical_id == "mtrl-eks/kube-system/hyperpod-dependencies"
    assert data["ChartRevision"] == "0" * 40
    verbs = [call[1] for call in calls]
    expected = ["repo", "dependency", "status", *(["uninstall"] if release_state else []), "upgrade"]
    assert verbs == expected
    assert calls[0][2:5] == ["add", "dep0", "https://aws.github.io/eks-charts"]
    upgrade = calls[-1]
    assert "--install" in upgrade
    assert "trainingOperators.enabled=true" in upgrade
    token = upgrade[upgrade.index("--kube-token") + 1]
    assert token.startswith("k8s-aws-v1.")
    assert upgrade[upgrade.index("--kube-apiserver") + 1].startswith("https://")
    assert Path(upgrade[upgrade.index("--kube-ca-file") + 1]).name == "ca.crt"
    assert "--kube-token" not in calls[1]  # chart dependency commands never see the cluster token
