"""Restricted instance groups (RIG): what the chart repository's install_rig_dependencies.sh does, computed here
from the live objects (no script is fetched), idempotently."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from helm_release.commands import KUBECTL, HelmError, Runner

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
