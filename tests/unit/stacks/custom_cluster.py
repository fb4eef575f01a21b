"""The fully customized cluster configuration the option tests synthesize once."""

from __future__ import annotations

from datetime import date
from typing import Any

ADMIN_ROLE = "arn:aws:iam::123456789012:role/PlatformAdmin"
VIEWER_ROLE = "arn:aws:iam::123456789012:role/Auditor"

# The day the custom cluster is synthesized on (a fixed clock): 1.34 leaves EKS standard support the next day.
SYNTH_DATE = date(2026, 12, 1)

# Every optional cluster feature at once, so one extra synth covers them all.
CUSTOM_CLUSTER: dict[str, Any] = {
    # The older allowed version with extended support: synthesized with the clock at SYNTH_DATE (conftest).
    "kubernetes_version": "1.34",
    "eks_support_type": "EXTENDED",
    "eks_admin_role_arns": [ADMIN_ROLE],
    "eks_viewer_role_arns": [VIEWER_ROLE],
    "eks_endpoint_access": "public_and_private",
    "eks_public_access_cidrs": ["203.0.113.0/24", "198.51.100.7/32"],
    "hyperpod_availability_zone_names": {"use1-az2": "us-east-1b"},
    "hyperpod_helm_extra_components": ["deep-health-check", "job-auto-restart"],
    "hyperpod_instance_groups": [
        {
            "name": "system",
            "instance_type": "ml.m5.xlarge",
            "purpose": "system",
            "run_count": 1,
            "idle_count": 1,
            "ebs_volume_size_gb": 100,
        },
        {
            "name": "gpu",
            "instance_type": "ml.p5.48xlarge",
            "run_count": 4,
            "idle_count": 2,
            "threads_per_core": 2,
            "ebs_volume_size_gb": 1000,
            "deep_health_checks": ["InstanceStress", "InstanceConnectivity"],
            "training_plan_arn": "arn:aws:sagemaker:us-east-1:123456789012:training-plan/plan-1",
            "availability_zone_id": "use1-az2",
            "labels": {"mtrl/role": "trainer"},
            "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
            "capacity_type": "spot",
        },
    ],
    "hyperpod_restricted_instance_group": {
        "instance_type": "ml.p5.48xlarge",
        "run_count": 2,
        "fsx_lustre_size_gib": 2400,
        "fsx_lustre_throughput_per_tib": 500,
        "availability_zone_id": "use1-az2",
    },
}
