"""When the EKS cluster's Kubernetes version leaves standard support, and what that costs or changes.

`mtrl config show` and synth (the EKS construct's annotation) print the same warning, computed here from the one
calendar in ``mtrl.settings.aws_facts``. The clock is a parameter so the 60-day window is testable with fixed dates.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from mtrl.settings.aws_facts import (
    EKS_EXTENDED_HOURLY_USD,
    EKS_STANDARD_HOURLY_USD,
    EKS_SUPPORT_CALENDAR,
    EKS_VERSION_CALENDAR_SOURCE,
    STANDARD_SUPPORT_WARNING_DAYS,
)
from mtrl.settings.cluster import ClusterSettings


def utc_today() -> date:
    return datetime.now(UTC).date()


def _next_version(version: str) -> str:
    major, minor = version.split(".")
    return f"{major}.{int(minor) + 1}"


def kubernetes_support_warning(settings: ClusterSettings, *, today: date) -> str | None:
    """The warning for a created EKS cluster whose version leaves standard support within
    STANDARD_SUPPORT_WARNING_DAYS of ``today`` (or already has); None otherwise, and for an existing cluster."""
    if settings.uses_existing_cluster:
        return None
    version = settings.kubernetes_version
    standard_end, extended_end = (date.fromisoformat(d) for d in EKS_SUPPORT_CALENDAR[version])
    days = (standard_end - today).days
    if days > STANDARD_SUPPORT_WARNING_DAYS:
        return None
    when = (
        f"leaves EKS standard support on {standard_end.isoformat()} (in {days} day{'s' if days != 1 else ''})"
        if days > 0
        else f"left EKS standard support on {standard_end.isoformat()}"
    )
    if settings.eks_support_type == "STANDARD":
        consequence = (
            f"with eks_support_type STANDARD, EKS upgrades the control plane to {_next_version(version)} itself on "
            "that date (the nodes and add-ons are not upgraded with it)"
        )
    else:
        consequence = (
            f"with eks_support_type EXTENDED, the control plane is then billed extended support "
            f"(${EKS_EXTENDED_HOURLY_USD:.2f} instead of ${EKS_STANDARD_HOURLY_USD:.2f} per cluster-hour) until "
            f"{extended_end.isoformat()}"
        )
    return (
        f"kubernetes_version {version} {when}; {consequence}. Set kubernetes_version to a newer supported version "
        f"and deploy before then (dates: {EKS_VERSION_CALENDAR_SOURCE})."
    )
