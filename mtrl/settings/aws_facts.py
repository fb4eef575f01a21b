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

# The EKS version calendar mtrl checks kubernetes_version against: the EKS user guide's release calendar,
# https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html#kubernetes-release-calendar (standard
# support: 14 months from release; extended: 12 more), as endoflife.date "Amazon EKS" also lists it (read 2026-12-07:
# 1.34 standard support ended 2026-12-02; 1.35 ends 2027-03-27). Each version: (end of standard support, end of
# extended support).
EKS_VERSION_CALENDAR_URL = (
    "https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html#kubernetes-release-calendar"
)
EKS_VERSION_CALENDAR_SOURCE = (
    f'EKS user guide "Understand the Kubernetes version lifecycle on EKS", {EKS_VERSION_CALENDAR_URL} '
    '(also endoflife.date "Amazon EKS")'
)
EKS_SUPPORT_CALENDAR: dict[str, tuple[str, str]] = {
    "1.34": ("2026-12-02", "2027-12-02"),
    "1.35": ("2027-03-27", "2028-03-27"),
}
# Kubernetes versions an EKS cluster for HyperPod may run: those SageMaker HyperPod documents for EKS ("Getting
# started with Amazon EKS support in SageMaker HyperPod": 1.30-1.35) that were in EKS standard support on
# 2026-12-01 (EKS_SUPPORT_CALENDAR: 1.33 and older are past it; the settings also refuse a version on the day its
# standard support has ended, mtrl.settings.eks_support), and that the deploy-time kubectl layer and the runner
# image's kubectl (1.34) may talk to under the Kubernetes version skew policy (kubectl within one minor of the API
# server). Value: the end of EKS *standard* support.
HYPERPOD_EKS_KUBERNETES_VERSIONS: dict[str, str] = {
    version: standard_end for version, (standard_end, _) in EKS_SUPPORT_CALENDAR.items()
}
# The default: the newest version HyperPod documents for EKS (1.36 is not in its list yet).
DEFAULT_KUBERNETES_VERSION = "1.35"
# `mtrl config show` and synth warn when the chosen version leaves standard support within this many days.
STANDARD_SUPPORT_WARNING_DAYS = 60
# EKS control-plane list prices (USD per cluster-hour), EKS pricing page: standard and extended support.
EKS_STANDARD_HOURLY_USD = 0.10
EKS_EXTENDED_HOURLY_USD = 0.60
