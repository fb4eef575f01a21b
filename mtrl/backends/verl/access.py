"""What the pipeline's role may do in the deployment's verl namespace, in one table.

The cluster stack renders the Kubernetes Role from it (``namespace_manifests``) and the adapter's preflight asks the
API server about every verb of it (SelfSubjectAccessReview), so what is granted and what is checked cannot drift
apart. Nothing here is cluster-wide: the Role and its RoleBinding live in the namespace, and the pipeline's IAM role
reaches them through an EKS access entry that carries only the Kubernetes group bound below (no access policy).

Discovery (``GET /apis/ray.io/v1``) and ``selfsubjectaccessreviews`` need no grant: Kubernetes binds the default
ClusterRoles ``system:discovery`` and ``system:basic-user`` to every authenticated user (Kubernetes documentation,
"Using RBAC Authorization", Default roles and role bindings).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ROLE_NAME = "mtrl-pipeline"
MANAGED_BY = "mtrl"


@dataclass(frozen=True)
class AccessRule:
    group: str  # API group; "" is the core group
    resource: str
    verbs: tuple[str, ...]


# Exactly what mtrl.backends.verl.adapter calls: create/get/delete of the RayJob, its ConfigMap and the run's own
# service account (mtrl.backends.verl.run_identity), the RayCluster list at teardown (KubeRay names it after the
# RayJob); list/watch of RayJobs for an operator's tooling on this role.
PIPELINE_ACCESS: tuple[AccessRule, ...] = (
    AccessRule("ray.io", "rayjobs", ("create", "delete", "get", "list", "watch")),
    AccessRule("ray.io", "rayclusters", ("get", "list")),
    AccessRule("", "configmaps", ("create", "delete", "get")),
    AccessRule("", "serviceaccounts", ("create", "delete", "get")),
)


def access_checks() -> list[tuple[str, str, str]]:
    """Every (verb, group, resource) the Role grants, in a stable order: what preflight asks about."""
    return [(verb, rule.group, rule.resource) for rule in PIPELINE_ACCESS for verb in rule.verbs]


def pipeline_group(namespace: str) -> str:
    """The Kubernetes group the pipeline's access entry carries and the RoleBinding binds (one per namespace)."""
    return f"mtrl:{namespace}:pipeline"


def namespace_manifests(namespace: str) -> list[dict[str, Any]]:
    """The namespace of a deployment's RayJobs, the pipeline's Role in it and the binding to its group. Each run's
    pods get a service account of their own at Provision (mtrl.backends.verl.run_identity), none is shared."""
    labels = {"app.kubernetes.io/managed-by": MANAGED_BY, "app.kubernetes.io/part-of": "mtrl-verl"}
    rules = [
        {"apiGroups": [rule.group], "resources": [rule.resource], "verbs": list(rule.verbs)} for rule in PIPELINE_ACCESS
    ]
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": ROLE_NAME, "namespace": namespace, "labels": labels},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": ROLE_NAME, "namespace": namespace, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE_NAME},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": pipeline_group(namespace)}],
        },
    ]
