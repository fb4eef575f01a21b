"""The restricted instance groups' dependencies (helm_release/rig_dependencies.py): what the HyperPod CLI's
install_rig_dependencies.sh does to the live objects, done idempotently."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

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
