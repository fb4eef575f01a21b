"""The KubeRay operator release, the verl namespace's RBAC release and the pipeline role's access entry (default
synth): pinned, namespaced, nothing cluster-wide, and the Role exactly what the verl adapter's preflight checks."""

from __future__ import annotations

import json
import re
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match, Template

from mtrl.backends.verl.access import ROLE_NAME, pipeline_group
from mtrl.backends.verl.adapter import REQUIRED_ACCESS
from mtrl.settings import SettingsError, load_settings
from stacks.app_builder import Deployment
from stacks.constructs.eks_cluster import JOB_NAMESPACES
from stacks.constructs.kuberay import (
    ACCESS_RELEASE,
    KUBERAY_CHART_PATH,
    KUBERAY_CHART_SHA256,
    KUBERAY_COMMIT,
    KUBERAY_OPERATOR_DIGEST,
    KUBERAY_VERSION,
    OPERATOR_NAMESPACE,
    OPERATOR_RELEASE,
)
from tests.unit.stacks.template_tools import of_type

NAMESPACE = "mtrl-verl"  # the default verl_namespace: '<prefix>-verl'


def _lid(stack: cdk.Stack, construct: Any) -> str:
    default = construct.node.default_child or construct
    return stack.get_logical_id(default)


def _release(cluster_json: dict[str, Any], name: str) -> tuple[str, dict[str, Any]]:
    releases = of_type(cluster_json, "Custom::HelmRelease").items()
    (found,) = [(i, r) for i, r in releases if r["Properties"]["Release"] == name]
    return found


@pytest.fixture(scope="module")
def pipeline_template(deployment: Deployment) -> Template:
    return Template.from_stack(deployment.pipeline)


def test_kuberay_is_pinned_to_a_version_with_the_status_fixes() -> None:
    # KubeRay #3860/#3903 (RayCluster leak / frozen status after a head restart) are fixed from 1.5.0; 1.7.0 is the
    # newest tag (research note part B §1.3). deletionPolicy is gone in 1.7.0 (tests/unit/backends/verl/...schema).
    major, minor, _ = (int(part) for part in KUBERAY_VERSION.split("."))
    assert (major, minor) >= (1, 7)
    assert re.fullmatch(r"[0-9a-f]{40}", KUBERAY_COMMIT)
    assert re.fullmatch(r"[0-9a-f]{64}", KUBERAY_CHART_SHA256)


@pytest.mark.parametrize("namespace", [*JOB_NAMESPACES, OPERATOR_NAMESPACE])
def test_the_verl_namespace_cannot_be_one_another_release_owns(namespace: str) -> None:
    # The access release creates and owns the namespace (helm): sharing the Nova Forge job namespaces or the
    # operator's own would make two releases own one Namespace object.
    with pytest.raises(SettingsError, match="is a namespace mtrl does not own"):
        load_settings({"verl_namespace": namespace}, environ={})


def test_the_operator_release_installs_the_verified_chart_watching_only_the_verl_namespace(
    cluster_template: Template,
) -> None:
    cluster_template.has_resource_properties(
        "Custom::HelmRelease",
        {
            "Release": OPERATOR_RELEASE,
            "Namespace": "kuberay-system",
            "ChartRepository": "ray-project/kuberay",
            "ChartRevision": KUBERAY_COMMIT,
            "ChartPath": KUBERAY_CHART_PATH,
            "ChartSha256": KUBERAY_CHART_SHA256,
            "ApplyCrds": "true",  # the chart's crds/ (RayJob, RayCluster, ...) at the same commit
            "ClusterName": Match.any_value(),
        },
    )


def test_the_operator_gets_namespaced_rbac_only(cluster_json: dict[str, Any]) -> None:
    # helm-chart/kuberay-operator at v1.7.0: singleNamespaceInstall renders Role/RoleBinding per watchNamespace entry
    # instead of the ClusterRole/ClusterRoleBinding, and the operator's --watch-namespace from the same list.
    _, release = _release(cluster_json, OPERATOR_RELEASE)
    values = json.loads(release["Properties"]["Values"])
    assert values["singleNamespaceInstall"] is True
    assert values["watchNamespace"] == [NAMESPACE]


def test_the_operator_runs_in_its_own_namespace_with_its_image_pinned_by_digest(cluster_json: dict[str, Any]) -> None:
    """Issue 36. In kube-system the chart's leader-election Role (helm-chart/kuberay-operator/templates/
    leader_election_role.yaml: configmaps and leases in .Release.Namespace) could rewrite CoreDNS's and kube-proxy's
    ConfigMaps; and a tag can be re-pushed. The digest: quay.io/kuberay/operator:v1.7.0 as skyhook-io/radar
    scripts/kuberay-demo/README.md pins it ("Exact pins"), with the same v1.7.0 source commit as KUBERAY_COMMIT."""
    _, release = _release(cluster_json, OPERATOR_RELEASE)
    assert release["Properties"]["Namespace"] == OPERATOR_NAMESPACE == "kuberay-system"
    values = json.loads(release["Properties"]["Values"])
    # The chart's templates/deployment.yaml renders "<image.repository>:<image.tag>".
    image = f"{values['image.repository']}:{values['image.tag']}"
    assert image == (
        "quay.io/kuberay/operator:v1.7.0@sha256:4a779237ef1c5262a63840ccf42d0d67f0b74e911158fbcaee4478fb1560bce6"
    )
    assert KUBERAY_OPERATOR_DIGEST in image
    assert KUBERAY_COMMIT == "59d663aeec13760646da3db9c1cf8cfe883e30b7"  # the source commit the digest was pinned with
    _, access = _release(cluster_json, ACCESS_RELEASE)
    # The access release creates nothing in kube-system (only helm's record of it is there).
    assert {
        o["metadata"].get("namespace", o["metadata"]["name"]) for o in json.loads(access["Properties"]["Manifests"])
    } == {NAMESPACE}


def test_the_rbac_release_is_the_namespace_the_role_and_its_binding_nothing_cluster_wide(
    cluster_json: dict[str, Any],
) -> None:
    _, release = _release(cluster_json, ACCESS_RELEASE)
    objects = json.loads(release["Properties"]["Manifests"])
    # No shared service account: each run's pods get their own at Submit (mtrl.backends.verl.run_identity).
    assert [o["kind"] for o in objects] == ["Namespace", "Role", "RoleBinding"]
    namespace, role, binding = objects
    assert namespace["metadata"]["name"] == NAMESPACE
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == NAMESPACE
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE_NAME}
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": pipeline_group(NAMESPACE)}
    ]


def test_the_granted_role_is_exactly_what_the_adapter_checks(cluster_json: dict[str, Any]) -> None:
    # The adapter's preflight asks one SelfSubjectAccessReview per (verb, group, resource) of REQUIRED_ACCESS; the
    # Role deployed must grant each of those and nothing else (tests/unit/backends/verl/test_verl_adapter.py runs the
    # adapter against an API server that enforces this Role).
    _, release = _release(cluster_json, ACCESS_RELEASE)
    (role,) = [o for o in json.loads(release["Properties"]["Manifests"]) if o["kind"] == "Role"]
    granted = sorted(
        (verb, group, resource)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    )
    assert granted == sorted(REQUIRED_ACCESS)
    assert {("create", "ray.io", "rayjobs"), ("delete", "ray.io", "rayjobs"), ("list", "ray.io", "rayclusters")} <= set(
        granted
    )


def test_the_releases_run_after_the_installer_access_and_the_operator_after_its_namespace(
    deployment: Deployment, cluster_json: dict[str, Any]
) -> None:
    stack = deployment.cluster
    assert stack.helm is not None
    access_id, access = _release(cluster_json, ACCESS_RELEASE)
    _, operator = _release(cluster_json, OPERATOR_RELEASE)
    installer_entry = _lid(stack, stack.helm.access_entry)
    assert installer_entry in access["DependsOn"]
    assert installer_entry in operator["DependsOn"]
    assert access_id in operator["DependsOn"]
    helm_function = _lid(stack, stack.helm.function)
    for release in (access, operator):
        assert release["Properties"]["ServiceToken"] == {"Fn::GetAtt": [helm_function, "Arn"]}


def test_the_pipeline_role_enters_the_cluster_with_only_the_namespace_group(
    deployment: Deployment, pipeline_template: Template
) -> None:
    # EKS access entries: a STANDARD entry's kubernetesGroups are what RBAC bindings name (EKS User Guide, "Create
    # access entries"); no access policy, so nothing beyond the namespace's Role (and the defaults every
    # authenticated user has: discovery, SelfSubjectAccessReview).
    role_id = _lid(deployment.pipeline, deployment.pipeline.backend.role)
    pipeline_template.has_resource_properties(
        "AWS::EKS::AccessEntry",
        {
            "PrincipalArn": {"Fn::GetAtt": [role_id, "Arn"]},
            "Type": "STANDARD",
            "KubernetesGroups": [pipeline_group(NAMESPACE)],
            "AccessPolicies": Match.absent(),
        },
    )
    pipeline_template.resource_count_is("AWS::EKS::AccessEntry", 1)
