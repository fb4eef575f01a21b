"""Static AWS facts the settings are validated against (kept in one place, easy to extend)."""

from __future__ import annotations

# Regions where the services mtrl deploys are generally available. A region missing here fails
# validation with a clear message; add it when AWS launches one.
KNOWN_REGIONS: frozenset[str] = frozenset(
    {
        "us-east-1", "us-east-2", "us-west-1", "us-west-2",
        "ca-central-1", "ca-west-1", "mx-central-1", "sa-east-1",
        "eu-west-1", "eu-west-2", "eu-west-3", "eu-central-1", "eu-central-2",
        "eu-north-1", "eu-south-1", "eu-south-2",
        "ap-northeast-1", "ap-northeast-2", "ap-northeast-3",
        "ap-southeast-1", "ap-southeast-2", "ap-southeast-3", "ap-southeast-4",
        "ap-southeast-5", "ap-southeast-7", "ap-south-1", "ap-south-2", "ap-east-1", "ap-east-2",
        "me-south-1", "me-central-1", "il-central-1", "af-south-1",
        "us-gov-west-1", "us-gov-east-1", "cn-north-1", "cn-northwest-1",
    }
)  # fmt: skip

# The values CloudWatch Logs accepts for a log group's retention, in days.
LOG_RETENTION_DAYS: tuple[int, ...] = (
    1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653,
)  # fmt: skip

# Kubernetes versions an EKS cluster for HyperPod may run: those the SageMaker HyperPod EKS prerequisites page
# ("Getting started with Amazon EKS support in SageMaker HyperPod": 1.28-1.34) documents AND Amazon EKS still
# supports ("Understand the Kubernetes version lifecycle on EKS": 1.28-1.31 are past extended support by
# 2026-12-01) AND the deploy-time kubectl layer (kubectl 1.34, requirements/infra.in) may talk to (Kubernetes
# version skew policy: kubectl within one minor version of the API server), which leaves out 1.32.
# Value: the end of EKS *standard* support; after it the control plane is billed extended support (6x the hourly
# price) until the version's end of extended support, 12 months later.
HYPERPOD_EKS_KUBERNETES_VERSIONS: dict[str, str] = {
    "1.33": "2026-07-29",
    "1.34": "2026-12-02",
}
# The default: the newest version HyperPod documents that is in EKS standard support on 2026-12-01.
DEFAULT_KUBERNETES_VERSION = "1.34"
