"""The KubeRay operator and the namespace verl runs use, installed by the deploy-time Helm function.

Two releases of that one function (``HyperPodHelmRelease.add_release``):

- ``mtrl-verl-access``: a chart made at deploy from objects rendered here at synth (mtrl.backends.verl.access): the
  deployment's RayJob namespace, the pipeline's Role in it and the RoleBinding to the pipeline's Kubernetes group.
  Nothing is downloaded for it.
- ``kuberay-operator``: ray-project/kuberay ``helm-chart/kuberay-operator`` at the commit of tag v1.7.0, downloaded
  from codeload.github.com and refused unless its files hash to ``KUBERAY_CHART_SHA256`` (mtrl.kube.charts). No
  registry reachable here ships the chart (the kuberay-helm repository's index stops at 1.4.2), so it is not rendered
  at synth; its CRDs are server-side applied first (helm never upgrades crds/). Single-namespace install: the
  operator gets a Role in the verl namespace only (no ClusterRole) and watches nothing else. It runs in its own
  namespace, ``kuberay-system`` (helm creates it), never kube-system: its leader-election Role edits the ConfigMaps of
  the namespace it runs in. Its image is pinned by digest.

``grant_pipeline_access`` gives the pipeline's backend role an EKS access entry carrying only that Kubernetes group:
no EKS access policy, because the narrowest one (``AmazonEKSEditPolicy`` scoped to the namespace) would also grant
pods/exec, secrets and every other namespaced resource, where the Role grants exactly what the adapter calls.
"""

from __future__ import annotations

import json

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from mtrl.backends.verl.access import namespace_manifests, pipeline_group
from mtrl.settings.verl import KUBERAY_OPERATOR_NAMESPACE
from stacks.constructs.hyperpod_helm import HyperPodHelmRelease

KUBERAY_VERSION = "1.7.0"
KUBERAY_REPOSITORY = "ray-project/kuberay"
KUBERAY_COMMIT = "59d663aeec13760646da3db9c1cf8cfe883e30b7"  # tag v1.7.0, 2026-08-19
KUBERAY_CHART_PATH = "helm-chart/kuberay-operator"
# mtrl.kube.charts.tree_sha256 of helm-chart/kuberay-operator at KUBERAY_COMMIT (36 files, CRDs included), computed
# from the repository at that commit; a different download fails the deploy before helm runs.
KUBERAY_CHART_SHA256 = "23d81bf08b7d16457cb8e6c9397198c24a05164318ce229aeabc94c5d84ce444"
# The operator image of that version, pinned by digest. Sources for quay.io/kuberay/operator:v1.7.0 being
# sha256:4a779237…bce6 (all searched 2026-12-08):
# - one: skyhook-io/radar pins exactly this reference, with the same v1.7.0 source commit 59d663ae, in
#   scripts/kuberay-demo/README.md ("Exact pins", commit 7f65f74a) and scripts/kuberay-demo.sh (one repository, so
#   one source).
# - no independent second one: in the indexed public repositories the digest and "kuberay/operator:v1.7.0" occur in
#   those two radar files only (the "kuberay/operator@sha256:" pins found are test fixtures of other digests);
#   ray-project/kuberay at tag v1.7.0 (commit 59d663ae, as above) names the image by tag only
#   (helm-chart/kuberay-operator/values.yaml `tag: v1.7.0`, ray-operator/config/default/kustomization.yaml
#   `newTag: v1.7.0`) and its image-release workflow records no digest.
# No source disagrees. Not re-read from quay.io (no registry access here or at synth):
# `crane digest quay.io/kuberay/operator:v1.7.0` shows it; check it before a deploy that matters. The chart renders
# "<image.repository>:<image.tag>" (templates/deployment.yaml), so a tag of "v1.7.0@sha256:…" pulls exactly that
# digest (a reference with both is resolved by its digest).
KUBERAY_OPERATOR_IMAGE = "quay.io/kuberay/operator"
KUBERAY_OPERATOR_DIGEST = "sha256:4a779237ef1c5262a63840ccf42d0d67f0b74e911158fbcaee4478fb1560bce6"
# Its own release name: the chart names its objects after the release, so the Role it leaves in the verl namespace
# differs from the one the release in kube-system (before issue 36) owned, and the new release installs while
# CloudFormation removes the old one.
OPERATOR_RELEASE = "mtrl-kuberay-operator"
OPERATOR_NAMESPACE = KUBERAY_OPERATOR_NAMESPACE
# The access release's record (a helm Secret) stays where it was: moving it would hand the verl namespace it owns to
# a second release. It creates nothing in kube-system.
ACCESS_RELEASE = "mtrl-verl-access"
ACCESS_RELEASE_NAMESPACE = "kube-system"


def operator_values(namespace: str) -> dict[str, object]:
    """The chart's values (helm-chart/kuberay-operator/values.yaml at the tag): namespaced RBAC in the watched
    namespace only, and the operator image of the chart's own version, by digest."""
    return {
        "singleNamespaceInstall": True,
        "watchNamespace": [namespace],
        "image.repository": KUBERAY_OPERATOR_IMAGE,
        "image.tag": f"v{KUBERAY_VERSION}@{KUBERAY_OPERATOR_DIGEST}",
    }


class KubeRayOperator(Construct):
    """Attributes: ``namespace``, ``access_release``, ``operator_release`` (custom resources)."""

    def __init__(self, scope: Construct, id_: str, *, installer: HyperPodHelmRelease, namespace: str) -> None:
        super().__init__(scope, id_)
        self.namespace = namespace
        self.access_release = installer.add_release(
            "VerlAccessRelease",
            release=ACCESS_RELEASE,
            namespace=ACCESS_RELEASE_NAMESPACE,
            source={"Manifests": json.dumps(namespace_manifests(namespace), sort_keys=True)},
        )
        self.operator_release = installer.add_release(
            "KubeRayOperatorRelease",
            release=OPERATOR_RELEASE,
            namespace=OPERATOR_NAMESPACE,
            source={
                "ChartRepository": KUBERAY_REPOSITORY,
                "ChartRevision": KUBERAY_COMMIT,
                "ChartPath": KUBERAY_CHART_PATH,
                "ChartSha256": KUBERAY_CHART_SHA256,
                "ApplyCrds": "true",
            },
            values=operator_values(namespace),
        )
        # The operator's Role goes into the namespace, which the access release creates.
        self.operator_release.node.add_dependency(self.access_release)


def grant_pipeline_access(
    scope: Construct, id_: str, *, cluster_name: str, role: iam.IRole, namespace: str
) -> eks.CfnAccessEntry:
    """The pipeline role's access entry: the Kubernetes group the namespace's RoleBinding binds, nothing else."""
    return eks.CfnAccessEntry(
        scope,
        id_,
        cluster_name=cluster_name,
        principal_arn=role.role_arn,
        type="STANDARD",
        kubernetes_groups=[pipeline_group(namespace)],
    )
