"""CloudFormation custom resource: install one pinned Helm release, idempotently (the HyperPod dependencies chart,
the KubeRay operator, the verl namespace's RBAC: stacks/constructs/hyperpod_helm.py ``add_release``).

The code is this folder's ``helm_release`` package (the shared ``mtrl`` package is staged beside it,
stacks/constructs/python_function.py); ``helm_release.custom_resource`` answers CloudFormation.
"""

from helm_release.custom_resource import handler

__all__ = ["handler"]
