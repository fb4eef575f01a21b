"""When the EKS cluster's Kubernetes version leaves standard support, and what that costs or changes.

A version past its end of standard support is refused when the settings are loaded (``standard_support_problem``: a
new cluster on it would be billed extended support from its first hour, or upgraded by EKS at once). Within 60 days of
the end, `mtrl config show` and synth (the EKS construct's annotation) print the same warning. Both are computed here
from the one calendar in ``mtrl.settings.aws_facts`` (its source: the EKS user guide's release calendar). The clock is
``utc_today`` (tests replace it) or a parameter, so both are testable with fixed dates.
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


def standard_support_problem(settings: ClusterSettings, *, today: date) -> str | None:
    """Why a created EKS cluster may not run ``kubernetes_version`` on ``today`` (its standard support has ended), else
    None; an existing cluster's version is not mtrl's to choose."""
    if settings.uses_existing_cluster:
        return None
    version = settings.kubernetes_version
    standard_end = date.fromisoformat(EKS_SUPPORT_CALENDAR[version][0])
    if today < standard_end:
        return None
    newer = [v for v, (end, _) in EKS_SUPPORT_CALENDAR.items() if date.fromisoformat(end) > today]
    return (
        f"kubernetes_version: {version} is past EKS standard support (it ended on {standard_end.isoformat()}); a "
        f"cluster on it is billed extended support or upgraded by EKS. Use {' or '.join(newer) or 'a newer version'} "
        f"(dates: {EKS_VERSION_CALENDAR_SOURCE})"
    )


def kubernetes_support_warning(settings: ClusterSettings, *, today: date) -> str | None:
    """The warning for a created EKS cluster whose version leaves standard support within
    STANDARD_SUPPORT_WARNING_DAYS of ``today``; None otherwise, for an existing cluster, and once the date has passed
    (``standard_support_problem`` refuses the version then: a warning never names a past date)."""
    if settings.uses_existing_cluster:
        return None
    version = settings.kubernetes_version
    standard_end, extended_end = (date.fromisoformat(d) for d in EKS_SUPPORT_CALENDAR[version])
    days = (standard_end - today).days
    if days > STANDARD_SUPPORT_WARNING_DAYS or days <= 0:
        return None
    when = f"leaves EKS standard support on {standard_end.isoformat()} (in {days} day{'s' if days != 1 else ''})"
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
