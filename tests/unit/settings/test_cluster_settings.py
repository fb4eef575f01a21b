"""Cluster settings: types, defaults and the cross-field rules, with messages naming the key."""

from __future__ import annotations

from typing import Any

import pytest

from mtrl.settings import SettingsError, load_settings


def _problem(context: dict[str, Any]) -> str:
    with pytest.raises(SettingsError) as caught:
        load_settings({"region": "us-east-1", **context})
    return str(caught.value)


def _group(**fields: Any) -> dict[str, Any]:
    return {"name": "gpu", "instance_type": "ml.g5.8xlarge", **fields}


def test_defaults_idle_the_gpu_group_at_zero() -> None:
    settings = load_settings({"region": "us-east-1"})
    (group,) = settings.hyperpod_instance_groups
    assert (group.name, group.idle_count, group.run_count, group.purpose) == ("gpu", 0, 1, "training")
    assert settings.training_instance_group is group
    assert settings.eks_endpoint_access == "private"
    assert settings.eks_public_access_cidrs == []
    assert not settings.uses_existing_cluster
    assert settings.hyperpod_restricted_instance_group is None
    assert settings.kubernetes_version == "1.35"
    assert settings.eks_support_type == "STANDARD"
    assert settings.hyperpod_node_access_entry is False  # HyperPod creates its own entries (defect 8)
    assert settings.hyperpod_deploy_interrupts_runs == []
    assert group.spread_across_zones is False  # one AZ per group (defect 6)


def test_the_default_endpoint_is_private_with_nothing_public() -> None:
    """Issue 36 item 5: no public EKS endpoint unless the operator asks for one. Every Kubernetes client mtrl deploys
    runs in the VPC (stacks/constructs/kubernetes_access.py), and Amazon EKS User Guide, "Deploy private clusters
    with limited internet access": nodes register through the private endpoint; public access is optional."""
    settings = load_settings({"region": "us-east-1"})
    assert (settings.eks_endpoint_access, settings.eks_public_access_cidrs) == ("private", [])
    assert settings.public_endpoint_warning() is None


def test_public_and_private_serves_the_operator_ranges_without_a_warning() -> None:
    settings = load_settings(
        {
            "region": "us-east-1",
            "eks_endpoint_access": "public_and_private",
            "eks_public_access_cidrs": ["203.0.113.0/24", "198.51.100.7/32"],
        }
    )
    assert settings.eks_public_access_cidrs == ["203.0.113.0/24", "198.51.100.7/32"]
    assert settings.public_endpoint_warning() is None


@pytest.mark.parametrize("access", ["public_and_private", "public"])
def test_a_public_endpoint_open_to_every_address_is_allowed_with_a_warning(access: str) -> None:
    settings = load_settings(
        {"region": "us-east-1", "eks_endpoint_access": access, "eks_public_access_cidrs": ["0.0.0.0/0"]}
    )
    warning = settings.public_endpoint_warning()
    assert warning is not None
    assert "every address" in warning
    assert "eks_public_access_cidrs" in warning


def test_an_existing_cluster_gets_no_endpoint_warning() -> None:
    """The endpoint settings apply only to a cluster the deployment creates."""
    settings = load_settings(
        {
            "region": "us-east-1",
            "existing_hyperpod_cluster_name": "hp",
            "existing_eks_cluster_name": "eks",
            "eks_endpoint_access": "public",
            "eks_public_access_cidrs": ["0.0.0.0/0"],
        }
    )
    assert settings.public_endpoint_warning() is None


def test_a_run_id_override_is_accepted() -> None:
    run_id = "demo-20261201T101500Z-0a1b2c3d"
    settings = load_settings({"region": "us-east-1", "hyperpod_deploy_interrupts_runs": [run_id]})
    assert settings.hyperpod_deploy_interrupts_runs == [run_id]


def test_groups_parse_from_a_cli_json_string() -> None:
    raw = '[{"name":"gpu","instance_type":"ml.p5.48xlarge","run_count":8,"idle_count":1}]'
    settings = load_settings({"region": "us-east-1", "hyperpod_instance_groups": raw})
    assert settings.training_instance_group.run_count == 8


@pytest.mark.parametrize(
    ("context", "message"),
    [
        (
            {"hyperpod_instance_groups": [_group(instance_type="p5.48xlarge")]},
            "hyperpod_instance_groups.0.instance_type",
        ),
        ({"hyperpod_instance_groups": [_group(idle_count=3, run_count=2)]}, "idle_count (3) is larger than run_count"),
        ({"hyperpod_instance_groups": [_group(idle_count=-1)]}, "hyperpod_instance_groups.0.idle_count"),
        ({"hyperpod_instance_groups": [_group(threads_per_core=4)]}, "threads_per_core"),
        ({"hyperpod_instance_groups": [_group(), _group()]}, "names must be unique"),
        ({"hyperpod_instance_groups": [_group(purpose="system")]}, "exactly one group needs purpose 'training'"),
        ({"hyperpod_instance_groups": []}, "at least one instance group"),
        ({"hyperpod_instance_groups": [_group(availability_zone_id="use1-az6")]}, "no AZ name given for AZ IDs"),
        ({"hyperpod_instance_groups": [_group(availability_zone_id="us-east-1a")]}, "availability_zone_id"),
        ({"hyperpod_instance_groups": [_group(deep_health_checks=["InstanceStress"])]}, "'deep-health-check'"),
        ({"hyperpod_instance_groups": [_group(training_plan_arn="plan-1")]}, "training_plan_arn"),
        ({"existing_hyperpod_cluster_name": "hp"}, "existing_eks_cluster_name"),
        ({"eks_admin_role_arns": ["arn:aws:iam::123456789012:user/bob"]}, "eks_admin_role_arns"),
        ({"eks_endpoint_access": "internal"}, "eks_endpoint_access"),
        # A public endpoint needs its ranges; the private default takes none (issue 36 item 5).
        ({"eks_endpoint_access": "public_and_private"}, "eks_public_access_cidrs is empty"),
        ({"eks_endpoint_access": "public"}, "eks_public_access_cidrs is empty"),
        ({"eks_public_access_cidrs": ["203.0.113.0/24"]}, "eks_endpoint_access is 'private'"),
        ({"eks_public_access_cidrs": ["203.0.113.1/24"]}, "host bits zero"),  # not a network address
        ({"eks_public_access_cidrs": ["10.0.0.0/8"]}, "eks_public_access_cidrs"),  # never a public source
        ({"eks_public_access_cidrs": ["2001:db8::/32"]}, "eks_public_access_cidrs"),  # EKS takes IPv4 only
        ({"eks_public_access_cidrs": ["203.0.113.0/24", "203.0.113.0/24"]}, "duplicates"),
        ({"eks_endpoint_access": "public", "eks_public_access_cidrs": ["203.0.113.0/24"]}, "'public_and_private'"),
        ({"hyperpod_helm_chart_revision": "main"}, "hyperpod_helm_chart_revision"),
        ({"hyperpod_helm_chart_revision": "b01cf90"}, "hyperpod_helm_chart_revision"),  # short sha
        ({"hyperpod_helm_chart_revision": "v3.9.0"}, "hyperpod_helm_chart_revision"),  # a tag name moves
        # Another commit with the default revision's file digest would be refused at deploy: refused here instead.
        ({"hyperpod_helm_chart_revision": "1" * 40}, "needs the digest of its chart's files too"),
        ({"hyperpod_helm_chart_sha256": "ABC"}, "hyperpod_helm_chart_sha256"),
        ({"kubernetes_version": "1.36"}, "not a version SageMaker HyperPod documents"),  # not in HyperPod's list
        ({"kubernetes_version": "1.33"}, "supported: 1.34, 1.35"),  # in extended support since 2026-07-29
        ({"kubernetes_version": "1.31"}, "supported: 1.34, 1.35"),  # past EKS extended support
        ({"eks_support_type": "standard"}, "eks_support_type"),  # the API's values are upper case
        ({"hyperpod_helm_extra_components": ["kuberay"]}, "hyperpod_helm_extra_components"),  # not in the pinned chart
        ({"hyperpod_deploy_interrupts_runs": ["all"]}, "not run ids"),
        (
            {"hyperpod_instance_groups": [_group(spread_across_zones=True, availability_zone_id="use1-az6")]},
            "exclude each other",
        ),
        ({"hyperpod_helm_extra_components": ["unknown-thing"]}, "hyperpod_helm_extra_components"),
        ({"hyperpod_availability_zone_names": {"use1-az6": "use1-az6"}}, "not an AZ name"),
        (
            {"hyperpod_restricted_instance_group": {"fsx_lustre_size_gib": 100}},
            "hyperpod_restricted_instance_group.fsx_lustre_size_gib",
        ),
        (
            {"hyperpod_restricted_instance_group": {"name": "gpu"}},
            "names must be unique",
        ),
    ],
)
def test_invalid_cluster_settings_name_the_key(context: dict[str, Any], message: str) -> None:
    assert message in _problem(context)


def test_helm_components_always_include_the_required_ones() -> None:
    settings = load_settings({"region": "us-east-1", "hyperpod_helm_extra_components": ["mlflow"]})
    on = {name for name, enabled in settings.helm_components.items() if enabled}
    assert on == {
        "health-monitoring-agent",
        "nvidia-device-plugin",
        "aws-efa-k8s-device-plugin",
        "training-operators",
        "mlflow",
    }


def test_existing_cluster_mode() -> None:
    settings = load_settings(
        {"region": "us-east-1", "existing_hyperpod_cluster_name": "hp", "existing_eks_cluster_name": "eks"}
    )
    assert settings.uses_existing_cluster
