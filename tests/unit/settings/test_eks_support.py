"""The Kubernetes standard-support window (issue 20 item 1) and the refusal past it (issue 36), with a fixed clock.

Dates: EKS user guide "Understand the Kubernetes version lifecycle on EKS", release calendar
(https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html#kubernetes-release-calendar), as
endoflife.date "Amazon EKS" lists it (1.34: standard support ends 2026-12-02, extended 2027-12-02; 1.35: 2027-03-27
and 2028-03-27). Meaning of the policy:
AWS::EKS::Cluster UpgradePolicy ("If the cluster is set to STANDARD, it will be automatically upgraded at the end of
standard support"; EXTENDED "will enter extended support"). Prices: $0.10 vs $0.60 per cluster-hour (EKS pricing).
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mtrl.cli import app as cli
from mtrl.settings import SettingsError, eks_support, load_settings
from mtrl.settings.aws_facts import (
    DEFAULT_KUBERNETES_VERSION,
    EKS_SUPPORT_CALENDAR,
    EKS_VERSION_CALENDAR_SOURCE,
    EKS_VERSION_CALENDAR_URL,
    HYPERPOD_EKS_KUBERNETES_VERSIONS,
    STANDARD_SUPPORT_WARNING_DAYS,
)
from mtrl.settings.eks_support import kubernetes_support_warning

REPO_ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner()


def _load(today: date, **context: Any) -> Any:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(eks_support, "utc_today", lambda: today)
        return load_settings({"region": "us-east-1", **context})


def _warning(today: date, **context: Any) -> str | None:
    return kubernetes_support_warning(_load(today, **context), today=today)


def test_the_calendar_names_its_source_and_covers_every_allowed_version() -> None:
    assert "endoflife.date" in EKS_VERSION_CALENDAR_SOURCE
    assert EKS_VERSION_CALENDAR_URL in EKS_VERSION_CALENDAR_SOURCE
    assert EKS_VERSION_CALENDAR_URL.startswith("https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions")
    assert "Understand the Kubernetes version lifecycle on EKS" in EKS_VERSION_CALENDAR_SOURCE
    assert set(HYPERPOD_EKS_KUBERNETES_VERSIONS) == set(EKS_SUPPORT_CALENDAR)
    assert EKS_SUPPORT_CALENDAR["1.34"] == ("2026-12-02", "2027-12-02")
    assert EKS_SUPPORT_CALENDAR["1.35"] == ("2027-03-27", "2028-03-27")
    assert STANDARD_SUPPORT_WARNING_DAYS == 60


def test_1_34_a_day_before_its_end_warns_with_the_date_and_the_automatic_upgrade() -> None:
    warning = _warning(date(2026, 12, 1), kubernetes_version="1.34")
    assert warning is not None
    assert "kubernetes_version 1.34 leaves EKS standard support on 2026-12-02 (in 1 day)" in warning
    assert "eks_support_type STANDARD, EKS upgrades the control plane to 1.35 itself on that date" in warning
    assert EKS_VERSION_CALENDAR_SOURCE in warning


def test_extended_support_warns_with_the_price_and_the_end_of_extended_support() -> None:
    warning = _warning(date(2026, 11, 1), kubernetes_version="1.34", eks_support_type="EXTENDED")
    assert warning is not None
    assert "on 2026-12-02 (in 31 days)" in warning
    assert "billed extended support ($0.60 instead of $0.10 per cluster-hour) until 2027-12-02" in warning


@pytest.mark.parametrize(
    ("today", "warns"),
    [
        (date(2026, 12, 1), False),  # 116 days before 2027-03-27
        (date(2027, 1, 25), False),  # 61 days before
        (date(2027, 1, 26), True),  # 60 days before: the window opens
        (date(2027, 3, 26), True),
    ],
)
def test_the_default_warns_only_inside_the_60_day_window(today: date, warns: bool) -> None:
    warning = _warning(today)  # the default, 1.35
    assert (warning is not None) is warns
    if warning:
        assert "2027-03-27" in warning


@pytest.mark.parametrize("today", [date(2026, 12, 2), date(2026, 12, 7)])
@pytest.mark.parametrize("support_type", ["STANDARD", "EXTENDED"])
def test_a_version_past_its_end_of_standard_support_is_refused_naming_the_date_and_source(
    today: date, support_type: str
) -> None:
    # Issue 36: `-c kubernetes_version=1.34` synthesized on 2026-12-07, five days after 1.34 left standard support.
    with pytest.raises(SettingsError) as raised:
        _load(today, kubernetes_version="1.34", eks_support_type=support_type)
    message = str(raised.value)
    assert "setting 'kubernetes_version': 1.34 is past EKS standard support (it ended on 2026-12-02)" in message
    assert "Use 1.35" in message
    assert EKS_VERSION_CALENDAR_URL in message


def test_the_default_version_is_in_standard_support_today() -> None:
    # The real clock: the default must be loadable on the day the tests run (and is warned about 60 days ahead).
    assert eks_support.utc_today() < date.fromisoformat(EKS_SUPPORT_CALENDAR[DEFAULT_KUBERNETES_VERSION][0])
    assert load_settings({"region": "us-east-1"}).kubernetes_version == DEFAULT_KUBERNETES_VERSION


def test_no_warning_names_a_date_that_has_passed() -> None:
    settings = _load(date(2026, 12, 1), kubernetes_version="1.34")
    assert kubernetes_support_warning(settings, today=date(2026, 12, 2)) is None
    assert kubernetes_support_warning(settings, today=date(2026, 12, 1)) is not None


def test_an_existing_cluster_gets_no_warning() -> None:
    # mtrl creates no EKS cluster then: kubernetes_version does not apply.
    existing = {"existing_hyperpod_cluster_name": "hp", "existing_eks_cluster_name": "eks"}
    assert _warning(date(2026, 12, 1), kubernetes_version="1.34", **existing) is None
    assert _warning(date(2026, 12, 7), kubernetes_version="1.34", **existing) is None  # and is not refused


def test_config_show_prints_the_warning_on_stderr_and_keeps_json_clean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(eks_support, "utc_today", lambda: date(2026, 12, 1))
    cdk_json = str(REPO_ROOT / "cdk.json")
    result = runner.invoke(cli, ["config", "show", "--cdk-json", cdk_json, "-c", "kubernetes_version=1.34", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kubernetes_version"]["value"] == "1.34"
    assert "warning:" in result.stderr
    assert "2026-12-02" in result.stderr
    quiet = runner.invoke(cli, ["config", "show", "--cdk-json", cdk_json, "--json"])
    assert quiet.exit_code == 0, quiet.output
    assert json.loads(quiet.stdout)["eks_support_type"]["value"] == "STANDARD"
    assert "standard support" not in quiet.stderr  # (the default backend's own warning may be there: not this one)
