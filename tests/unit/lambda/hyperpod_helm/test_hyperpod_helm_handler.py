"""The deploy-time Helm installer's handler: the EKS token shape, exactly one CloudFormation response on every path,
and no deploy while a run holds the cluster (the commands, the chart and the rig dependencies have files of their
own)."""

from __future__ import annotations

import base64
import json
import time
import urllib.parse
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
from pinned_chart import PINNED_REPOSITORIES, PINNED_STYLE_CHART, REQUIRED

from mtrl.runs.slots import SlotPool
from tests.run_table import create_run_table


def test_eks_token_is_a_presigned_get_caller_identity_bound_to_the_cluster(
    release: ModuleType, aws_credentials: None
) -> None:
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
            "ChartSha256": "a" * 64,
            "DependencyRepositories": json.dumps(PINNED_REPOSITORIES),
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


def test_delete_succeeds_when_the_cluster_is_already_gone(release: ModuleType, mocked_aws: None) -> None:
    event = _event("Delete", PhysicalResourceId="mtrl-eks/kube-system/hyperpod-dependencies")
    assert boto3.client("eks", region_name="us-east-1").list_clusters()["clusters"] == []
    physical_id, data = release.apply(event, lambda: 900.0)
    assert physical_id == "mtrl-eks/kube-system/hyperpod-dependencies"
    assert data == {}


def test_create_fails_when_the_cluster_does_not_exist(release: ModuleType, mocked_aws: None) -> None:
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

    def fake_fetch(repository: str, revision: str, workdir: Path, *, sha256: str) -> Path:
        assert sha256 == "a" * 64  # verified against the pinned digest (fetch_chart's own check)
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


def test_an_update_refuses_while_a_run_holds_the_cluster(run_guard: ModuleType, mocked_aws: None) -> None:
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
