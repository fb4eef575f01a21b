"""CloudFormation custom resource: install one pinned Helm release, idempotently (the HyperPod dependencies chart,
the KubeRay operator, the verl namespace's RBAC: stacks/constructs/hyperpod_helm.py ``add_release``).

Create and Update run ``helm upgrade --install`` (a retry after a partial install converges instead of failing on
"cannot re-use a name"); a release left in a pending state by an interrupted run is rolled back or removed first.
Delete runs ``helm uninstall`` and succeeds when the release or the cluster is gone. Where the chart comes from:
``prepare_chart`` (a pinned commit, never a branch; verified by digest, or objects rendered at synth).

HyperPod chart: only the dependencies the deployment installs stay in its Chart.yaml (``Dependencies``), so
``helm dependency update`` downloads nothing for a disabled component. With a restricted instance group
(``RestrictedGroups``) the RIG dependencies follow: what the chart repository's install_rig_dependencies.sh
does, computed here from the live objects (no script is fetched). An Update refuses to run while a run holds
the cluster (a live slot in ``RunTable``) unless every holder is listed in ``InterruptibleRuns``: the
HyperPod cluster update that follows would reset the run's group to its idle count.

helm and kubectl come from the CDK kubectl layer (/opt/helm, /opt/kubectl). The function talks to the EKS public
endpoint with a short-lived IAM token, so it needs no kubeconfig and no AWS CLI. It is the custom resource's service
token itself (no provider framework), so it answers CloudFormation exactly once, from ``handler``, also on every
failure path and before its own timeout.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import boto3

# The shared mtrl package is staged next to this handler (stacks/constructs/python_function.py).
from mtrl.kube.charts import archive_url, extract_chart_dir, manifest_chart, prune_chart, verify_tree
from mtrl.kube.token import eks_token

LOGGER = logging.getLogger()
LOGGER.setLevel(logging.INFO)

HELM = os.environ.get("HELM_BINARY", "/opt/helm/helm")
KUBECTL = os.environ.get("KUBECTL_BINARY", "/opt/kubectl/kubectl")
CHART_PATH_IN_REPO = "helm_chart/HyperPodHelmChart"
# Seconds kept back from the Lambda deadline to report to CloudFormation even when helm overruns.
_RESPONSE_MARGIN_S = 60

Runner = Callable[[Sequence[str]], str]


class HelmError(RuntimeError):
    """A helm command failed; the message carries its output."""


def set_flags(values: Mapping[str, Any]) -> list[str]:
    """``--set`` flags in a stable order; booleans become true/false as helm expects, a list one ``key[i]`` each."""
    flags: list[str] = []
    for key in sorted(values):
        value = values[key]
        items = [(f"{key}[{i}]", item) for i, item in enumerate(value)] if isinstance(value, list) else [(key, value)]
        for name, item in items:
            text = ("true" if item else "false") if isinstance(item, bool) else str(item)
            if "," in text or "\n" in text:
                raise ValueError(f"helm value for {key!r} must not contain ',' or newlines")
            flags += ["--set", f"{name}={text}"]
    return flags


def upgrade_install_command(
    *, release: str, namespace: str, chart_dir: str, values: Mapping[str, Any], timeout_s: int, skip_crds: bool = False
) -> list[str]:
    """``skip_crds``: the chart's crds/ were applied first (apply_crds), which, unlike helm, also upgrades them."""
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
        *(["--skip-crds"] if skip_crds else []),
        *set_flags(values),
    ]


def apply_crds(run: Runner, chart_dir: Path) -> None:
    """Server-side apply of the chart's crds/: helm installs them once and never upgrades them, and the KubeRay CRDs
    exceed the size client-side apply's last-applied annotation allows."""
    crds = chart_dir / "crds"
    if not crds.is_dir() or not any(crds.glob("*.yaml")):
        raise ValueError("ApplyCrds is set but the chart has no crds/*.yaml")
    run([KUBECTL, "apply", "--server-side", "--force-conflicts", "--field-manager", "mtrl-helm", "-f", str(crds)])


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


# --- deploy during a run -------------------------------------------------------------------------------

SLOT_PK = "SLOT"  # mtrl.runs.slots: slot items pk=SLOT, sk=<index>, holder=<run id>, lease_until=<epoch s>


def live_slot_holders(table: str, region: str, now: float) -> list[str]:
    """Runs holding the training cluster: a slot with a holder whose lease has not run out."""
    dynamodb = boto3.client("dynamodb", region_name=region)
    response = dynamodb.query(
        TableName=table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": SLOT_PK}},
        ConsistentRead=True,
    )
    holders = []
    for item in response.get("Items", []):
        holder = item.get("holder", {}).get("S")
        lease_until = float(item.get("lease_until", {}).get("N", "0"))
        if holder and lease_until >= now:
            holders.append(holder)
    return sorted(holders)


def refuse_while_runs_hold_the_cluster(props: Mapping[str, Any], region: str, now: float) -> None:
    """Raise unless no run holds the cluster or every holder is listed in InterruptibleRuns."""
    table = props.get("RunTable")
    if not table:
        return
    holders = live_slot_holders(str(table), region, now)
    allowed = set(json.loads(props.get("InterruptibleRuns") or "[]"))
    blocked = [run_id for run_id in holders if run_id not in allowed]
    if blocked:
        raise RuntimeError(
            f"runs {blocked} hold the training cluster: this deploy would reset their instance groups to the idle "
            "count and stop them. Wait for them (mtrl runs), cancel them (mtrl cancel <run-id>), or deploy again with "
            f"-c hyperpod_deploy_interrupts_runs='{json.dumps(blocked)}' to interrupt them. Nothing was changed."
        )


# --- restricted instance groups (RIG) ------------------------------------------------------------------

RIG_LABEL = "sagemaker.amazonaws.com/instance-group-type"
RIG_TAINT = {"key": "sagemaker.amazonaws.com/RestrictedNode", "value": "Worker", "effect": "NoSchedule"}
# Image versions a RIG node's VPC CNI needs at least (install_rig_dependencies.sh, release_v2 of the chart repo).
RIG_MIN_CNI_IMAGES = {
    "aws-node": ("1.19.6", "v1.19.6-eksbuild.1"),
    "aws-eks-nodeagent": ("1.2.2", "v1.2.2-eksbuild.1"),
    "aws-vpc-cni-init": ("1.19.6", "v1.19.6-eksbuild.1"),
}
_SERVER_FIELDS = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink")


def _version(text: str) -> tuple[int, ...]:
    numbers = re.findall(r"\d+", text.split("-", maxsplit=1)[0])
    return tuple(int(n) for n in numbers)


def _match_expressions(obj: Mapping[str, Any]) -> list[list[dict[str, Any]]]:
    terms = (
        obj.get("spec", {})
        .get("template", {})
        .get("spec", {})
        .get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms")
    )
    return [term.setdefault("matchExpressions", []) for term in terms] if terms else []


def _required_rig_affinity(obj: dict[str, Any], operator: str) -> None:
    """Every required node-selector term gets ``instance-group-type <operator> [Restricted]`` (set, not added twice)."""
    template = obj.setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {})
    if not _match_expressions(obj):
        template.setdefault("affinity", {}).setdefault("nodeAffinity", {})[
            "requiredDuringSchedulingIgnoredDuringExecution"
        ] = {"nodeSelectorTerms": [{"matchExpressions": []}]}
    for expressions in _match_expressions(obj):
        expressions[:] = [e for e in expressions if e.get("key") != RIG_LABEL]
        expressions.append({"key": RIG_LABEL, "operator": operator, "values": ["Restricted"]})


def _copy_for_rig(obj: Mapping[str, Any]) -> dict[str, Any]:
    copy: dict[str, Any] = json.loads(json.dumps(obj))
    copy.pop("status", None)
    metadata = copy.setdefault("metadata", {})
    for field in (*_SERVER_FIELDS, "ownerReferences"):
        metadata.pop(field, None)
    annotations = metadata.get("annotations", {})
    for key in list(annotations):
        if key.startswith("kubectl.kubernetes.io/") or key.startswith("deprecated.daemonset"):
            annotations.pop(key)
    metadata["name"] = "rig-" + str(metadata["name"])
    return copy


def non_rig_aws_node_affinity(aws_node: Mapping[str, Any]) -> dict[str, Any]:
    """The stock aws-node DaemonSet's affinity with restricted nodes excluded (they run rig-aws-node)."""
    patched: dict[str, Any] = json.loads(json.dumps(aws_node))
    _required_rig_affinity(patched, "NotIn")
    return dict(patched["spec"]["template"]["spec"]["affinity"])


def rig_aws_node(aws_node: Mapping[str, Any]) -> dict[str, Any]:
    """The VPC CNI DaemonSet for restricted nodes: IMDS-only mode, prefix delegation, new-enough images."""
    rig = _copy_for_rig(aws_node)
    _required_rig_affinity(rig, "In")
    pod = rig["spec"]["template"]["spec"]
    for container in pod.get("containers", []) + pod.get("initContainers", []):
        minimum = RIG_MIN_CNI_IMAGES.get(container.get("name", ""))
        if minimum and ":" in container.get("image", ""):
            repository, tag = container["image"].rsplit(":", 1)
            if _version(tag.lstrip("v")) < _version(minimum[0]):
                container["image"] = f"{repository}:{minimum[1]}"
        if container.get("name") == "aws-node":
            env = [
                e
                for e in container.get("env", [])
                if e.get("name") not in {"ENABLE_PREFIX_DELEGATION", "ENABLE_IMDS_ONLY_MODE"}
            ]
            env += [
                {"name": "ENABLE_PREFIX_DELEGATION", "value": "true"},
                {"name": "ENABLE_IMDS_ONLY_MODE", "value": "true"},
            ]
            container["env"] = env
    return rig


def rig_coredns(coredns: Mapping[str, Any]) -> dict[str, Any]:
    """CoreDNS as a DaemonSet on every restricted node (the stock Deployment never schedules there)."""
    rig = _copy_for_rig(coredns)
    rig["kind"] = "DaemonSet"
    spec = rig["spec"]
    strategy = spec.pop("strategy", {}) or {}
    for field in ("replicas", "progressDeadlineSeconds", "revisionHistoryLimit", "paused"):
        spec.pop(field, None)
    spec["updateStrategy"] = {"type": strategy.get("type", "RollingUpdate"), "rollingUpdate": {"maxUnavailable": 1}}
    pod = spec["template"]["spec"]
    pod.pop("topologySpreadConstraints", None)
    pod["nodeSelector"] = {RIG_LABEL: "Restricted"}
    pod["tolerations"] = [t for t in pod.get("tolerations", []) if t.get("key") != RIG_TAINT["key"]] + [dict(RIG_TAINT)]
    return rig


def tolerate_restricted_nodes(obj: Mapping[str, Any], *, prefer_other_nodes: bool) -> dict[str, Any]:
    """A merge patch: the workload also tolerates restricted nodes (and, for operators, prefers the others)."""
    pod = obj.get("spec", {}).get("template", {}).get("spec", {})
    tolerations = [t for t in pod.get("tolerations", []) or [] if t.get("key") != RIG_TAINT["key"]] + [dict(RIG_TAINT)]
    patch: dict[str, Any] = {"tolerations": tolerations}
    if prefer_other_nodes:
        affinity = json.loads(json.dumps(pod.get("affinity") or {}))
        affinity.setdefault("nodeAffinity", {})["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {
                "weight": 100,
                "preference": {"matchExpressions": [{"key": RIG_LABEL, "operator": "NotIn", "values": ["Restricted"]}]},
            }
        ]
        patch["affinity"] = affinity
    return {"spec": {"template": {"spec": patch}}}


def regional_image(image: str, region: str) -> str:
    """The same ECR image from this region's registry (restricted nodes cannot pull across regions)."""
    return re.sub(r"\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com", f".dkr.ecr.{region}.amazonaws.com", image)


def install_rig_dependencies(kubectl: Runner, *, release: str, region: str, workdir: Path) -> list[str]:
    """What install_rig_dependencies.sh does, idempotently (every step sets, none appends twice)."""

    def get(kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            return dict(json.loads(kubectl([KUBECTL, "get", kind, name, "-n", namespace, "-o", "json"])))
        except HelmError as error:
            if "notfound" in str(error).lower().replace(" ", ""):
                return None
            raise

    def patch(kind: str, name: str, namespace: str, body: Mapping[str, Any]) -> None:
        kubectl([KUBECTL, "patch", kind, name, "-n", namespace, "--type", "merge", "-p", json.dumps(body)])

    def apply(obj: Mapping[str, Any]) -> None:
        path = workdir / f"{obj['kind'].lower()}-{obj['metadata']['name']}.json"
        path.write_text(json.dumps(obj))
        kubectl(
            [KUBECTL, "apply", "--server-side", "--force-conflicts", "--field-manager", "mtrl-rig", "-f", str(path)]
        )

    done: list[str] = []
    aws_node = get("daemonset", "aws-node", "kube-system")
    coredns = get("deployment", "coredns", "kube-system")
    if aws_node is None or coredns is None:
        raise RuntimeError("the vpc-cni and coredns add-ons must be installed before the RIG dependencies")
    apply(rig_aws_node(aws_node))
    patch(
        "daemonset",
        "aws-node",
        "kube-system",
        {"spec": {"template": {"spec": {"affinity": non_rig_aws_node_affinity(aws_node)}}}},
    )
    apply(rig_coredns(coredns))
    done += ["rig-aws-node", "aws-node (not on restricted nodes)", "rig-coredns"]
    operators = [
        ("deployment", f"{release}-training-operators", "kubeflow", True),
        ("deployment", f"{release}-mpi-operator", "kube-system", True),
    ]
    for kind, name, namespace, prefer in operators:
        current = get(kind, name, namespace)
        if current is not None:
            patch(kind, name, namespace, tolerate_restricted_nodes(current, prefer_other_nodes=prefer))
            done.append(name)
    efa_name = f"{release}-aws-efa-k8s-device-plugin"
    efa = get("daemonset", efa_name, "kube-system")
    if efa is None:
        raise RuntimeError(f"daemonset kube-system/{efa_name} is missing: the EFA device plugin must be installed")
    body = tolerate_restricted_nodes(efa, prefer_other_nodes=False)
    containers = efa["spec"]["template"]["spec"].get("containers", [])
    body["spec"]["template"]["spec"]["containers"] = [
        {"name": c["name"], "image": regional_image(c["image"], region)} for c in containers
    ]
    patch("daemonset", efa_name, "kube-system", body)
    done.append(efa_name)
    return done


def make_runner(
    *, endpoint: str, token: str, ca_file: str, env: Mapping[str, str], seconds_left: Callable[[], float]
) -> Runner:
    """Run helm against the cluster with an explicit API server, token and CA (no kubeconfig)."""

    def run(command: Sequence[str]) -> str:
        args = list(command)
        if args[0] == KUBECTL:
            args += ["--server", endpoint, "--token", token, "--certificate-authority", ca_file]
        elif args[1] not in {"dependency", "repo", "version"}:
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


def prepare_chart(props: Mapping[str, Any], workdir: Path, run: Runner) -> Path:
    """The release's chart, from one of three pinned sources: Kubernetes objects rendered at synth (``Manifests``,
    nothing downloaded); a directory of a GitHub commit verified by its files' digest (``ChartPath`` + ``ChartSha256``);
    or the HyperPod chart at a commit, its sub-charts pruned to ``Dependencies`` and fetched at the versions it pins."""
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
    chart_dir = fetch_chart(props["ChartRepository"], props["ChartRevision"], workdir)
    # Only the sub-charts this deployment installs, at the versions the pinned Chart.yaml names; their http
    # repositories must be known to helm first.
    for index, url in enumerate(prune_chart(chart_dir, json.loads(props["Dependencies"]))):
        run([HELM, "repo", "add", f"dep{index}", url, "--force-update"])
    run([HELM, "dependency", "update", "--skip-refresh", str(chart_dir)])
    return chart_dir


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
        if event["RequestType"] == "Update":
            refuse_while_runs_hold_the_cluster(props, region, time.time())

        chart_dir = prepare_chart(props, workdir, run)
        crds_first = str(props.get("ApplyCrds", "false")).lower() == "true"
        if crds_first:
            apply_crds(run, chart_dir)
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
                skip_crds=crds_first,
            )
        )
        if str(props.get("RestrictedGroups", "false")).lower() == "true":
            LOGGER.info(
                "RIG dependencies: %s", install_rig_dependencies(run, release=release, region=region, workdir=workdir)
            )
        return physical_id, {
            "Release": release,
            "Namespace": namespace,
            "ChartRevision": props.get("ChartRevision", ""),
        }
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
