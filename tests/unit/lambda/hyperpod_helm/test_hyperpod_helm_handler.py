"""The deploy-time Helm installer: idempotent commands, stuck-release recovery, safe chart extraction,
EKS token shape, and exactly one CloudFormation response on every path."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import tarfile
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
from moto import mock_aws

from mtrl.kube import charts
from mtrl.runs.slots import SlotPool
from tests.run_table import create_run_table


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


# The shape of helm_chart/HyperPodHelmChart/Chart.yaml at the pinned tag (v3.9.0): a flat list of maps, remote
# sub-charts from three hosts, the rest file:// (written here in that form; not the chart's own file).
PINNED_STYLE_CHART = """apiVersion: v2
name: hyperpod-helm-chart
# comment
version: 0.1.0
appVersion: "1.16.0"

dependencies:
  - name: cert-manager
    version: "v1.18.2"
    repository: oci://quay.io/jetstack/charts
    condition: cert-manager.enabled
  - name: training-operators
    version: "0.1.0"
    repository: "file://charts/training-operators"
    condition: trainingOperators.enabled
  - name: nvidia-device-plugin
    version: "0.16.1"
    repository: https://nvidia.github.io/k8s-device-plugin
    condition: nvidia-device-plugin.devicePlugin.enabled
  - name: aws-efa-k8s-device-plugin
    version: "0.5.20"
    repository: https://aws.github.io/eks-charts/
    condition: aws-efa-k8s-device-plugin.devicePlugin.enabled
  - name: health-monitoring-agent
    version: "0.1.0"
    repository: "file://charts/health-monitoring-agent"
    condition: health-monitoring-agent.enabled
  - name: mlflow
    version: "0.1.0"
    repository: "file://charts/mlflow"
    condition: mlflow.enabled
"""
REQUIRED = ["aws-efa-k8s-device-plugin", "health-monitoring-agent", "nvidia-device-plugin", "training-operators"]


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


def test_eks_token_is_a_presigned_get_caller_identity_bound_to_the_cluster(release: ModuleType, aws_env: None) -> None:
    token = release.eks_token("mtrl-eks", "us-east-1")
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
            "Dependencies": json.dumps(REQUIRED),
        },
        **extra,
    }


@pytest.fixture
def responses(custom_resource: ModuleType, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
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

    monkeypatch.setattr(custom_resource.urllib.request, "urlopen", urlopen)
    return sent


def test_a_failure_is_reported_once_as_failed(
    handler: ModuleType, custom_resource: ModuleType, responses: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(event: Any, remaining: Any) -> None:
        raise RuntimeError("helm exploded")

    monkeypatch.setattr(custom_resource, "apply", broken)
    handler.handler(_event("Create"), _Context())
    assert len(responses) == 1
    assert responses[0]["Status"] == "FAILED"
    assert "helm exploded" in responses[0]["Reason"]


def test_success_reports_a_stable_physical_id(
    handler: ModuleType, custom_resource: ModuleType, responses: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        custom_resource, "apply", lambda event, remaining: ("mtrl-eks/kube-system/deps", {"Release": "deps"})
    )
    handler.handler(_event("Update", PhysicalResourceId="mtrl-eks/kube-system/deps"), _Context())
    assert [r["Status"] for r in responses] == ["SUCCESS"]
    assert responses[0]["PhysicalResourceId"] == "mtrl-eks/kube-system/deps"


@mock_aws
def test_delete_succeeds_when_the_cluster_is_already_gone(release: ModuleType, aws_env: None) -> None:
    event = _event("Delete", PhysicalResourceId="mtrl-eks/kube-system/hyperpod-dependencies")
    assert boto3.client("eks", region_name="us-east-1").list_clusters()["clusters"] == []
    physical_id, data = release.apply(event, lambda: 900.0)
    assert physical_id == "mtrl-eks/kube-system/hyperpod-dependencies"
    assert data == {}


@mock_aws
def test_create_fails_when_the_cluster_does_not_exist(release: ModuleType, aws_env: None) -> None:
    with pytest.raises(Exception, match=r"ResourceNotFound|No cluster found"):
        release.apply(_event("Create"), lambda: 900.0)


@pytest.mark.parametrize("release_state", [None, "pending-install"])
@pytest.mark.usefixtures("eks_cluster")
def test_create_runs_the_full_idempotent_sequence(
    release: ModuleType,
    chart_source: ModuleType,
    helm_calls: Any,
    monkeypatch: pytest.MonkeyPatch,
    release_state: str | None,
) -> None:
    helm_calls.release_state = release_state
    calls = helm_calls.calls

    def fake_fetch(repository: str, revision: str, workdir: Path) -> Path:
        chart = workdir / "chart"
        chart.mkdir()
        (chart / "Chart.yaml").write_text(PINNED_STYLE_CHART)
        return chart

    monkeypatch.setattr(chart_source, "fetch_chart", fake_fetch)
    event = _event("Create")
    event["ResourceProperties"]["Values"] = json.dumps({"trainingOperators.enabled": True})
    physical_id, data = release.apply(event, lambda: 900.0)

    assert physical_id == "mtrl-eks/kube-system/hyperpod-dependencies"
    assert data["ChartRevision"] == "0" * 40
    verbs = [call[1] for call in calls]
    expected = ["repo", "repo", "dependency", "status", *(["uninstall"] if release_state else []), "upgrade"]
    assert verbs == expected
    assert calls[0][2:5] == ["add", "dep0", "https://aws.github.io/eks-charts"]
    assert calls[1][2:5] == ["add", "dep1", "https://nvidia.github.io/k8s-device-plugin"]  # never quay.io
    upgrade = calls[-1]
    assert "--install" in upgrade
    assert "trainingOperators.enabled=true" in upgrade
    token = upgrade[upgrade.index("--kube-token") + 1]
    assert token.startswith("k8s-aws-v1.")
    assert upgrade[upgrade.index("--kube-apiserver") + 1].startswith("https://")
    assert Path(upgrade[upgrade.index("--kube-ca-file") + 1]).name == "ca.crt"
    assert all("--kube-token" not in call for call in calls[:3])  # repo and dependency commands: no cluster token


# --- a deploy during a run (defect 7) -------------------------------------------------------------------

RUN = "demo-20261201T101500Z-0a1b2c3d"


def _run_table() -> str:
    create_run_table(boto3.client("dynamodb", region_name="us-east-1"), "mtrl-runs")
    return "mtrl-runs"


def _pool(clock: float) -> SlotPool:
    client = boto3.client("dynamodb", region_name="us-east-1")
    return SlotPool(client, "mtrl-runs", capacity=1, lease_seconds=600, stale_after_seconds=600, clock=lambda: clock)


@mock_aws
def test_an_update_refuses_while_a_run_holds_the_cluster(run_guard: ModuleType, aws_env: None) -> None:
    # The run table's slots are what the pipeline takes before it scales a group (mtrl.runs.slots, the real code).
    table = _run_table()
    pool = _pool(1_000.0)
    pool.enqueue(RUN, "20261201T101500Z")
    assert pool.try_acquire(RUN).acquired
    props = {"RunTable": table, "InterruptibleRuns": "[]"}
    assert run_guard.live_slot_holders(table, "us-east-1", 1_000.0) == [RUN]
    with pytest.raises(RuntimeError, match=rf"runs \['{RUN}'\] hold the training cluster") as caught:
        run_guard.refuse_while_runs_hold_the_cluster(props, "us-east-1", 1_000.0)
    assert "hyperpod_deploy_interrupts_runs" in str(caught.value)
    assert "Nothing was changed" in str(caught.value)
    # The override names the run; a lease that ran out (a crashed run) holds nothing; a released slot neither.
    run_guard.refuse_while_runs_hold_the_cluster(
        {**props, "InterruptibleRuns": json.dumps([RUN])}, "us-east-1", 1_000.0
    )
    run_guard.refuse_while_runs_hold_the_cluster(props, "us-east-1", 1_000.0 + 601)
    pool.release(RUN)
    run_guard.refuse_while_runs_hold_the_cluster(props, "us-east-1", 1_000.0)


@pytest.mark.usefixtures("eks_cluster")
def test_a_refused_update_runs_no_helm_and_reports_failed(
    handler: ModuleType,
    commands: ModuleType,
    chart_source: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    responses: list[dict[str, Any]],
) -> None:
    table = _run_table()
    pool = _pool(time.time())
    pool.enqueue(RUN, "20261201T101500Z")
    assert pool.try_acquire(RUN).acquired
    ran: list[list[str]] = []
    monkeypatch.setattr(commands.subprocess, "run", lambda args, **kwargs: ran.append(args))
    monkeypatch.setattr(chart_source, "fetch_chart", lambda *args: pytest.fail("must not fetch the chart"))
    event = _event("Update", PhysicalResourceId="mtrl-eks/kube-system/hyperpod-dependencies")
    event["ResourceProperties"]["RunTable"] = table
    handler.handler(event, _Context())
    assert ran == []
    assert [r["Status"] for r in responses] == ["FAILED"]
    assert RUN in responses[0]["Reason"]


# --- restricted instance groups (defect 4) ------------------------------------------------------------
# What helm_chart/install_rig_dependencies.sh (aws/sagemaker-hyperpod-cli, release_v2) does to the live objects:
# a rig-aws-node DaemonSet (IMDS-only mode, prefix delegation, CNI >= 1.19.6, only on Restricted nodes) and the
# stock aws-node kept off them, a rig-coredns DaemonSet on them, the training/MPI operators and the EFA plugin
# tolerating the RestrictedNode taint (operators preferring other nodes, EFA pulling from this region's ECR).

ECR = "602401143452.dkr.ecr.us-east-1.amazonaws.com"
AWS_NODE: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {
        "name": "aws-node",
        "namespace": "kube-system",
        "uid": "u-1",
        "resourceVersion": "42",
        "annotations": {"deprecated.daemonset.template.generation": "1"},
        "labels": {"k8s-app": "aws-node"},
    },
    "spec": {
        "selector": {"matchLabels": {"k8s-app": "aws-node"}},
        "template": {
            "spec": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}
                                    ]
                                }
                            ]
                        }
                    }
                },
                "containers": [
                    {
                        "name": "aws-node",
                        "image": "602401143452.dkr.ecr.us-east-1.amazonaws.com/amazon-k8s-cni:v1.18.3-eksbuild.1",
                        "env": [{"name": "ENABLE_PREFIX_DELEGATION", "value": "false"}],
                    },
                    {
                        "name": "aws-eks-nodeagent",
                        "image": f"{ECR}/amazon/aws-network-policy-agent:v1.3.0-eksbuild.1",
                    },
                ],
                "initContainers": [
                    {
                        "name": "aws-vpc-cni-init",
                        "image": "602401143452.dkr.ecr.us-east-1.amazonaws.com/amazon-k8s-cni-init:v1.18.3-eksbuild.1",
                    }
                ],
            }
        },
    },
    "status": {"numberReady": 2},
}
COREDNS: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "coredns", "namespace": "kube-system", "uid": "u-2"},
    "spec": {
        "replicas": 2,
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%"}},
        "progressDeadlineSeconds": 600,
        "selector": {"matchLabels": {"k8s-app": "kube-dns"}},
        "template": {
            "spec": {
                "topologySpreadConstraints": [{"maxSkew": 1}],
                "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
                "containers": [{"name": "coredns", "image": "coredns:v1.11"}],
            }
        },
    },
}


def _expressions(obj: dict[str, Any]) -> list[dict[str, Any]]:
    terms = obj["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    return [e for term in terms["nodeSelectorTerms"] for e in term["matchExpressions"]]


def test_rig_aws_node_runs_only_on_restricted_nodes_with_imds_only_mode(rig_dependencies: ModuleType) -> None:
    rig = rig_dependencies.rig_aws_node(AWS_NODE)
    assert rig["metadata"]["name"] == "rig-aws-node"
    assert not {"uid", "resourceVersion"} & set(rig["metadata"])
    assert "status" not in rig
    assert {"key": rig_dependencies.RIG_LABEL, "operator": "In", "values": ["Restricted"]} in _expressions(rig)
    pod = rig["spec"]["template"]["spec"]
    cni, agent = pod["containers"]
    env = {e["name"]: e["value"] for e in cni["env"]}
    assert env == {"ENABLE_PREFIX_DELEGATION": "true", "ENABLE_IMDS_ONLY_MODE": "true"}
    assert cni["image"].endswith(":v1.19.6-eksbuild.1")  # raised to the minimum
    assert agent["image"].endswith(":v1.3.0-eksbuild.1")  # already newer than 1.2.2: kept
    assert pod["initContainers"][0]["image"].endswith(":v1.19.6-eksbuild.1")
    assert AWS_NODE["metadata"]["name"] == "aws-node"  # the input is not changed
    assert (
        rig_dependencies.rig_aws_node(rig | {"metadata": {**rig["metadata"], "name": "aws-node"}}) == rig
    )  # idempotent


def test_stock_aws_node_keeps_off_restricted_nodes_idempotently(rig_dependencies: ModuleType) -> None:
    affinity = rig_dependencies.non_rig_aws_node_affinity(AWS_NODE)
    patched = {"spec": {"template": {"spec": {"affinity": affinity}}}}
    expressions = _expressions(patched)
    assert {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]} in expressions
    assert expressions.count({"key": rig_dependencies.RIG_LABEL, "operator": "NotIn", "values": ["Restricted"]}) == 1
    assert rig_dependencies.non_rig_aws_node_affinity(patched) == affinity  # a second deploy adds nothing


def test_rig_coredns_is_a_daemonset_on_restricted_nodes(rig_dependencies: ModuleType) -> None:
    rig = rig_dependencies.rig_coredns(COREDNS)
    assert (rig["kind"], rig["metadata"]["name"]) == ("DaemonSet", "rig-coredns")
    spec = rig["spec"]
    assert not {"replicas", "strategy", "progressDeadlineSeconds"} & set(spec)
    assert spec["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
    pod = spec["template"]["spec"]
    assert pod["nodeSelector"] == {rig_dependencies.RIG_LABEL: "Restricted"}
    assert rig_dependencies.RIG_TAINT in pod["tolerations"]
    assert "topologySpreadConstraints" not in pod


def test_operators_tolerate_restricted_nodes_but_prefer_others(rig_dependencies: ModuleType) -> None:
    operator = {
        "spec": {
            "template": {"spec": {"tolerations": [rig_dependencies.RIG_TAINT, {"key": "a", "operator": "Exists"}]}}
        }
    }
    patch = rig_dependencies.tolerate_restricted_nodes(operator, prefer_other_nodes=True)["spec"]["template"]["spec"]
    assert patch["tolerations"].count(rig_dependencies.RIG_TAINT) == 1  # set once, however often it runs
    assert {"key": "a", "operator": "Exists"} in patch["tolerations"]
    (preferred,) = patch["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred["preference"]["matchExpressions"] == [
        {"key": rig_dependencies.RIG_LABEL, "operator": "NotIn", "values": ["Restricted"]}
    ]
    assert rig_dependencies.regional_image(
        "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/efa:v0.5.6", "eu-north-1"
    ) == ("602401143452.dkr.ecr.eu-north-1.amazonaws.com/eks/efa:v0.5.6")


def test_rig_install_sequence_against_a_fake_cluster(
    commands: ModuleType, rig_dependencies: ModuleType, tmp_path: Path
) -> None:
    efa = {
        "spec": {
            "template": {
                "spec": {
                    "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
                    "containers": [
                        {
                            "name": "aws-efa-k8s-device-plugin",
                            "image": "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/efa:v1",
                        }
                    ],
                }
            }
        }
    }
    live = {
        ("daemonset", "aws-node"): AWS_NODE,
        ("deployment", "coredns"): COREDNS,
        ("deployment", "deps-training-operators"): {"spec": {"template": {"spec": {}}}},
        ("daemonset", "deps-aws-efa-k8s-device-plugin"): efa,
    }
    calls: list[list[str]] = []
    applied: list[dict[str, Any]] = []

    def kubectl(command: Sequence[str]) -> str:
        calls.append(list(command))
        verb = command[1]
        if verb == "get":
            found = live.get((command[2], command[3]))
            if found is None:
                raise commands.HelmError('Error from server (NotFound): deployments.apps "x" not found')
            return json.dumps(found)
        if verb == "apply":
            applied.append(json.loads(Path(command[-1]).read_text()))
        return ""

    done = rig_dependencies.install_rig_dependencies(kubectl, release="deps", region="us-east-1", workdir=tmp_path)
    assert [o["metadata"]["name"] for o in applied] == ["rig-aws-node", "rig-coredns"]
    assert all("--server-side" in c for c in calls if c[1] == "apply")
    patched = {c[3]: json.loads(c[c.index("-p") + 1]) for c in calls if c[1] == "patch"}
    assert set(patched) == {"aws-node", "deps-training-operators", "deps-aws-efa-k8s-device-plugin"}  # no MPI here
    efa_patch = patched["deps-aws-efa-k8s-device-plugin"]["spec"]["template"]["spec"]
    assert efa_patch["containers"][0]["image"].startswith("602401143452.dkr.ecr.us-east-1.amazonaws.com/")
    assert rig_dependencies.RIG_TAINT in efa_patch["tolerations"]
    assert "deps-training-operators" in done

    del live[("daemonset", "deps-aws-efa-k8s-device-plugin")]
    with pytest.raises(RuntimeError, match="EFA device plugin must be installed"):
        rig_dependencies.install_rig_dependencies(kubectl, release="deps", region="us-east-1", workdir=tmp_path)


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
    assert charts.prune_chart(chart, ["training-operators", "health-monitoring-agent"]) == []
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
