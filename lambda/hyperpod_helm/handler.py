"""CloudFormation custom resource: install the HyperPod dependencies Helm chart, idempotently.

Create and Update run ``helm upgrade --install`` (a retry after a partial install converges instead of
failing on "cannot re-use a name"); a release left in a pending state by an interrupted run is rolled back
or removed first. Delete runs ``helm uninstall`` and succeeds when the release or the cluster is gone.

The chart comes from a pinned commit of aws/sagemaker-hyperpod-cli (never a branch); helm and kubectl
come from the CDK kubectl layer (/opt/helm, /opt/kubectl). The function talks to the EKS public endpoint
with a short-lived IAM token, so it needs no kubeconfig and no AWS CLI.

This function is the custom resource's service token itself (no provider framework), so it answers
CloudFormation exactly once, from ``handler``, also on every failure path and before its own timeout.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import boto3
from botocore.signers import RequestSigner

LOGGER = logging.getLogger()
LOGGER.setLevel(logging.INFO)

HELM = os.environ.get("HELM_BINARY", "/opt/helm/helm")
CHART_PATH_IN_REPO = "helm_chart/HyperPodHelmChart"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
# Seconds kept back from the Lambda deadline to report to CloudFormation even when helm overruns.
_RESPONSE_MARGIN_S = 60

Runner = Callable[[Sequence[str]], str]


class HelmError(RuntimeError):
    """A helm command failed; the message carries its output."""


def eks_token(cluster_name: str, region: str, session: boto3.session.Session | None = None) -> str:
    """A bearer token for the EKS API: a presigned STS GetCallerIdentity URL bound to the cluster name."""
    session = session or boto3.session.Session()
    sts = session.client("sts", region_name=region)
    signer = RequestSigner(
        sts.meta.service_model.service_id, region, "sts", "v4", session.get_credentials(), session.events
    )
    params = {
        "method": "GET",
        "url": f"https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15",
        "body": {},
        "headers": {"x-k8s-aws-id": cluster_name},
        "context": {},
    }
    url = signer.generate_presigned_url(params, region_name=region, expires_in=60, operation_name="")
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def set_flags(values: Mapping[str, Any]) -> list[str]:
    """``--set`` flags in a stable order; booleans become true/false as helm expects."""
    flags: list[str] = []
    for key in sorted(values):
        value = values[key]
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        if "," in text or "\n" in text:
            raise ValueError(f"helm value for {key!r} must not contain ',' or newlines")
        flags += ["--set", f"{key}={text}"]
    return flags


def upgrade_install_command(
    *, release: str, namespace: str, chart_dir: str, values: Mapping[str, Any], timeout_s: int
) -> list[str]:
    return [
        HELM,
        "upgrade",
        release,
        chart_dir,
        "--install",
        "--namespace",
        namespace,
        "--history-max",
        "5",
        "--timeout",
        f"{max(timeout_s, 30)}s",
        *set_flags(values),
    ]


def recover_pending_release(run: Runner, *, release: str, namespace: str) -> str | None:
    """Unblock a release an interrupted helm run left in pending-*; returns what was done (or None)."""
    try:
        status = json.loads(run([HELM, "status", release, "--namespace", namespace, "--output", "json"]))
    except HelmError as error:
        if "not found" in str(error).lower():
            return None
        raise
    state = str(status.get("info", {}).get("status", ""))
    if not state.startswith("pending"):
        return None
    revision = int(status.get("version", 1))
    if state == "pending-install" or revision <= 1:
        run([HELM, "uninstall", release, "--namespace", namespace, "--ignore-not-found"])
        return f"removed release stuck in {state}"
    run([HELM, "rollback", release, str(revision - 1), "--namespace", namespace])
    return f"rolled back release stuck in {state} to revision {revision - 1}"


def fetch_chart(repository: str, revision: str, workdir: Path) -> Path:
    """Download the chart directory of one pinned commit (a tarball of that commit, nothing else)."""
    if not _REPO.match(repository) or not _COMMIT.match(revision):
        raise ValueError("ChartRepository must be 'owner/name' and ChartRevision a full 40-character commit")
    url = f"https://codeload.github.com/{repository}/tar.gz/{revision}"
    archive = workdir / "chart.tar.gz"
    with urllib.request.urlopen(url, timeout=120) as response, archive.open("wb") as out:
        shutil.copyfileobj(response, out)
    extract_chart(archive, workdir)
    return workdir / "chart"


def extract_chart(archive: Path, workdir: Path) -> None:
    """Extract only ``<top>/helm_chart/HyperPodHelmChart/**`` into ``workdir/chart`` (no path escapes)."""
    target = workdir / "chart"
    with tarfile.open(archive, "r:gz") as tar:
        members = []
        for member in tar.getmembers():
            parts = member.name.split("/", 1)
            if len(parts) != 2 or not parts[1].startswith(CHART_PATH_IN_REPO + "/"):
                continue
            member.name = parts[1][len(CHART_PATH_IN_REPO) + 1 :]
            if member.name:
                members.append(member)
        if not members:
            raise ValueError(f"the archive has no {CHART_PATH_IN_REPO}/ directory")
        tar.extractall(target, members=members, filter="data")


def chart_repositories(chart_yaml: str) -> list[str]:
    """The http(s) repositories a Chart.yaml's dependencies come from (file:// and oci:// need no `repo add`)."""
    found = re.findall(r"^\s*(?:-\s*)?repository:\s*[\"']?(https?://[^\s\"']+)", chart_yaml, flags=re.MULTILINE)
    return sorted({url.rstrip("/") for url in found})


def make_runner(
    *, endpoint: str, token: str, ca_file: str, env: Mapping[str, str], seconds_left: Callable[[], float]
) -> Runner:
    """Run helm against the cluster with an explicit API server, token and CA (no kubeconfig)."""

    def run(command: Sequence[str]) -> str:
        args = list(command)
        if args[1] not in {"dependency", "repo", "version"}:
            args += ["--kube-apiserver", endpoint, "--kube-token", token, "--kube-ca-file", ca_file]
        LOGGER.info("running: %s", " ".join(a for a in args if a != token))
        budget = seconds_left() - _RESPONSE_MARGIN_S
        if budget < 10:
            raise TimeoutError("no time left before the Lambda deadline; CloudFormation may retry the update")
        completed = subprocess.run(args, capture_output=True, text=True, env=dict(env), timeout=budget, check=False)
        if completed.returncode != 0:
            raise HelmError(f"{' '.join(args[:3])} failed: {completed.stderr.strip() or completed.stdout.strip()}")
        return completed.stdout

    return run


def _helm_env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.startswith(("AWS_", "LANG", "TZ"))}
    env.update(
        {
            "PATH": "/opt/helm:/opt/kubectl:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(workdir),
            "HELM_CACHE_HOME": str(workdir / ".cache"),
            "HELM_CONFIG_HOME": str(workdir / ".config"),
            "HELM_DATA_HOME": str(workdir / ".data"),
        }
    )
    return env


def apply(event: Mapping[str, Any], remaining_s: Callable[[], float]) -> tuple[str, dict[str, str]]:
    """Do what the event asks; returns (physical id, data)."""
    props = event["ResourceProperties"]
    cluster, release, namespace = props["ClusterName"], props["Release"], props["Namespace"]
    region = props.get("Region") or os.environ.get("AWS_REGION", "us-east-1")
    physical_id = f"{cluster}/{namespace}/{release}"
    eks = boto3.client("eks", region_name=region)
    try:
        described = eks.describe_cluster(name=cluster)["cluster"]
    except eks.exceptions.ResourceNotFoundException:
        if event["RequestType"] == "Delete":
            return event.get("PhysicalResourceId", physical_id), {}
        raise

    workdir = Path(tempfile.mkdtemp(prefix="helm-", dir="/tmp"))
    try:
        ca_file = workdir / "ca.crt"
        ca_file.write_bytes(base64.b64decode(described["certificateAuthority"]["data"]))
        run = make_runner(
            endpoint=described["endpoint"],
            token=eks_token(cluster, region),
            ca_file=str(ca_file),
            env=_helm_env(workdir),
            seconds_left=remaining_s,
        )
        if event["RequestType"] == "Delete":
            run([HELM, "uninstall", release, "--namespace", namespace, "--ignore-not-found"])
            return event.get("PhysicalResourceId", physical_id), {}

        chart_dir = fetch_chart(props["ChartRepository"], props["ChartRevision"], workdir)
        # Sub-charts at the versions the pinned Chart.yaml names; http repos must be known to helm first.
        for index, url in enumerate(chart_repositories((chart_dir / "Chart.yaml").read_text())):
            run([HELM, "repo", "add", f"dep{index}", url, "--force-update"])
        run([HELM, "dependency", "update", "--skip-refresh", str(chart_dir)])
        recovered = recover_pending_release(run, release=release, namespace=namespace)
        if recovered:
            LOGGER.info("%s", recovered)
        values = json.loads(props["Values"]) if isinstance(props["Values"], str) else dict(props["Values"])
        run(
            upgrade_install_command(
                release=release,
                namespace=namespace,
                chart_dir=str(chart_dir),
                values=values,
                timeout_s=int(remaining_s() - 2 * _RESPONSE_MARGIN_S),
            )
        )
        return physical_id, {"Release": release, "Namespace": namespace, "ChartRevision": props["ChartRevision"]}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def send_response(
    event: Mapping[str, Any], status: str, physical_id: str, data: Mapping[str, str], reason: str
) -> None:
    body = json.dumps(
        {
            "Status": status,
            "Reason": reason[:3500],
            "PhysicalResourceId": physical_id,
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
            "Data": dict(data),
        }
    ).encode()
    url = event["ResponseURL"]
    if not url.startswith("https://"):
        raise ValueError("ResponseURL must be https")
    request = urllib.request.Request(  # noqa: S310 - CloudFormation's presigned https URL
        url, data=body, method="PUT", headers={"Content-Type": "", "Content-Length": str(len(body))}
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - checked above
        LOGGER.info("CloudFormation response: %s %s", status, response.status)


def handler(event: dict[str, Any], context: Any) -> None:
    LOGGER.info("%s %s (stack %s)", event.get("RequestType"), event.get("LogicalResourceId"), event.get("StackId"))
    fallback_id = event.get("PhysicalResourceId") or f"{event.get('LogicalResourceId', 'helm')}-failed"
    try:
        physical_id, data = apply(event, lambda: context.get_remaining_time_in_millis() / 1000)
    except Exception as error:  # every failure must reach CloudFormation, or the stack waits an hour
        LOGGER.exception("helm custom resource failed")
        send_response(event, "FAILED", fallback_id, {}, f"{type(error).__name__}: {error}")
        return
    send_response(event, "SUCCESS", physical_id, data, "ok")
