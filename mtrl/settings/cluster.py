"""Cluster settings: the EKS cluster, the HyperPod cluster and its instance groups (or an existing cluster)."""

from __future__ import annotations

import ipaddress
import re
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mtrl.settings.aws_facts import DEFAULT_KUBERNETES_VERSION, HYPERPOD_EKS_KUBERNETES_VERSIONS
from mtrl.settings.base import SettingsGroup

# Names and shapes the SageMaker and EKS APIs accept (from the AWS::SageMaker::Cluster schema).
_GROUP_NAME = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
_CLUSTER_NAME = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
_EKS_CLUSTER_NAME = r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$"
_AZ_ID = r"^[a-z]{2,4}\d-az\d{1,2}$"  # e.g. use1-az6 (an AZ *ID*, the same in every account)
_TRAINING_PLAN_ARN = r"^arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}:training-plan/.+$"
_ROLE_ARN = re.compile(r"^arn:aws[a-z\-]*:iam::\d{12}:role/[A-Za-z0-9+=,.@_/-]+$")
_TAINT_KEY = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_COMMIT = r"^[0-9a-f]{40}$"
ANYWHERE = "0.0.0.0/0"
# Source addresses the public EKS endpoint never sees: private (RFC 1918), shared (RFC 6598), loopback, link-local.
_NEVER_PUBLIC_SOURCES = tuple(
    ipaddress.IPv4Network(block)
    for block in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16")
)
_RUN_ID = r"^[a-z0-9][a-z0-9-]{0,47}-\d{8}T\d{6}Z-[0-9a-f]{8}$"  # mtrl.runs.ids.RUN_ID_PATTERN

# The HyperPod dependencies chart (aws/sagemaker-hyperpod-cli, helm_chart/HyperPodHelmChart) at release tag
# v3.9.0, a commit on the default branch (main); never a pull-request ref, which GitHub may regenerate or drop.
HELM_CHART_TAG = "v3.9.0"
HELM_CHART_COMMIT = "b01cf90676553a711ab1a8ac51422adbb09aef6b"
# mtrl.kube.charts.tree_sha256 of that commit's helm_chart/HyperPodHelmChart (every file's path and SHA-256): the
# installer refuses a download whose files differ, whatever the archive's bytes (GitHub's archives are not
# byte-stable; a commit's files are).
HELM_CHART_SHA256 = "9395aa534b4f753ce50b1f37daf2e305de2826fa323915c54f91c43b0df69f0d"
_SHA256 = r"^[0-9a-f]{64}$"

# Helm values that switch each optional component of the HyperPod dependencies chart on or off.
HELM_COMPONENT_VALUE_KEYS: dict[str, str] = {
    "health-monitoring-agent": "health-monitoring-agent.enabled",
    "nvidia-device-plugin": "nvidia-device-plugin.devicePlugin.enabled",
    "aws-efa-k8s-device-plugin": "aws-efa-k8s-device-plugin.devicePlugin.enabled",
    "training-operators": "trainingOperators.enabled",
    "neuron-device-plugin": "neuron-device-plugin.devicePlugin.enabled",
    "mpi-operator": "mpi-operator.enabled",
    "deep-health-check": "deep-health-check.enabled",
    "job-auto-restart": "job-auto-restart.enabled",
    "hyperpod-patching": "hyperpod-patching.enabled",
    "mlflow": "mlflow.enabled",
    "cert-manager": "cert-manager.enabled",
}
# The chart's Chart.yaml dependency each component is (the same name for all of them at the pinned tag). The
# installer keeps only the installed ones in Chart.yaml, so helm fetches nothing for a disabled component.
HELM_COMPONENT_CHARTS: dict[str, str] = {name: name for name in HELM_COMPONENT_VALUE_KEYS}
# Always installed: node resiliency (health agent), GPU/EFA scheduling and PyTorchJob (training operator).
REQUIRED_HELM_COMPONENTS: tuple[str, ...] = (
    "health-monitoring-agent",
    "nvidia-device-plugin",
    "aws-efa-k8s-device-plugin",
    "training-operators",
)
ExtraHelmComponent = Literal[
    "neuron-device-plugin",
    "mpi-operator",
    "deep-health-check",
    "job-auto-restart",
    "hyperpod-patching",
    "mlflow",
    "cert-manager",
]
DeepHealthCheck = Literal["InstanceStress", "InstanceConnectivity"]
EksLogType = Literal["api", "audit", "authenticator", "controllerManager", "scheduler"]
EKS_LOG_TYPES: tuple[EksLogType, ...] = ("api", "audit", "authenticator", "controllerManager", "scheduler")


class _Nested(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, defer_build=True)


class TaintSettings(_Nested):
    """A Kubernetes taint HyperPod puts on every node of an instance group."""

    key: str = Field(..., pattern=_TAINT_KEY, max_length=317, description="Taint key, e.g. 'nvidia.com/gpu'.")
    value: str | None = Field(None, max_length=63, description="Taint value (optional).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        "NoSchedule", description="What the scheduler does with pods that do not tolerate the taint."
    )


class _GroupBase(_Nested):
    name: str = Field(..., pattern=_GROUP_NAME, description="Instance group name (unique in the cluster).")
    instance_type: str = Field(..., description="SageMaker instance type, e.g. 'ml.g5.8xlarge' (starts with 'ml.').")
    run_count: int = Field(
        1,
        ge=1,
        le=6758,
        description="The most instances one run may scale this group to (a run asks for its manifest's "
        "instance_count, default run_instance_count; preflight refuses more than this).",
    )
    idle_count: int = Field(
        0, ge=0, le=6758, description="Instances when no run holds the cluster (0 = scale to zero, no GPU cost)."
    )
    threads_per_core: Literal[1, 2] = Field(
        1, description="1 disables hyper-threading (usual for training), 2 keeps it."
    )
    ebs_volume_size_gb: int = Field(
        500, ge=1, le=16384, description="Extra EBS volume per instance, mounted at /opt/sagemaker (container storage)."
    )
    deep_health_checks: list[DeepHealthCheck] = Field(
        default_factory=list,
        description="On-start deep health checks (InstanceStress, InstanceConnectivity); they lengthen node start-up.",
    )
    training_plan_arn: str | None = Field(
        None, pattern=_TRAINING_PLAN_ARN, description="SageMaker flexible training plan that reserves the capacity."
    )
    availability_zone_id: str | None = Field(
        None,
        pattern=_AZ_ID,
        description="Place the group in the private subnet of this AZ *ID* (e.g. 'use1-az6'; see "
        "hyperpod_availability_zone_names). Empty means the first private subnet's AZ, unless "
        "spread_across_zones.",
    )
    spread_across_zones: bool = Field(
        False,
        description="Let HyperPod place the group's instances in every private subnet (all AZs). Off by default: "
        "EFA/NCCL traffic between AZs is slow and billed, so each group sits in one AZ.",
    )

    @field_validator("instance_type")
    @classmethod
    def _instance_type_is_sagemaker(cls, value: str) -> str:
        if not value.startswith("ml.") or value.count(".") != 2:
            raise ValueError("must be a SageMaker instance type such as 'ml.g5.8xlarge'")
        return value

    @field_validator("deep_health_checks")
    @classmethod
    def _checks_unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("contains duplicates")
        return value

    @model_validator(mode="after")
    def _idle_not_above_run(self) -> Self:
        if self.idle_count > self.run_count:
            raise ValueError(f"idle_count ({self.idle_count}) is larger than run_count ({self.run_count})")
        if self.spread_across_zones and self.availability_zone_id:
            raise ValueError("spread_across_zones and availability_zone_id exclude each other (one AZ, or all)")
        return self


class InstanceGroupSettings(_GroupBase):
    """One HyperPod instance group (created at its idle count; the pipeline scales it to run_count per run)."""

    purpose: Literal["training", "system"] = Field(
        "training",
        description="'training': the group the pipeline scales per run (exactly one); 'system': an always-on "
        "group for operators and controllers.",
    )
    capacity_type: Literal["on_demand", "spot"] = Field(
        "on_demand",
        description="'spot' asks HyperPod for Spot capacity (cheaper, can be reclaimed; node recovery replaces it).",
    )
    labels: dict[str, str] = Field(default_factory=dict, description="Kubernetes labels HyperPod puts on the nodes.")
    taints: list[TaintSettings] = Field(default_factory=list, description="Kubernetes taints put on the nodes.")


class RestrictedInstanceGroupSettings(_GroupBase):
    """The restricted instance group Amazon Nova Forge trains on (no lifecycle script; HyperPod-managed FSx)."""

    name: str = Field("nova-rig", pattern=_GROUP_NAME, description="Restricted instance group name.")
    instance_type: str = Field("ml.p5.48xlarge", description="Instance type Nova Forge recipes support (ml.p5...).")
    fsx_lustre_size_gib: int = Field(
        1200, ge=1200, le=100800, description="Size of the FSx for Lustre file system HyperPod creates for the group."
    )
    fsx_lustre_throughput_per_tib: Literal[125, 250, 500, 1000] = Field(
        250, description="FSx for Lustre throughput in MB/s per TiB of storage."
    )


def _default_instance_groups() -> list[dict[str, object]]:
    # Dicts, not models, so the generated documentation can print the default as JSON.
    return [
        {
            "name": "gpu",
            "instance_type": "ml.g5.8xlarge",
            "run_count": 1,
            "idle_count": 0,
            "purpose": "training",
        }
    ]


class ClusterSettings(SettingsGroup):
    """The EKS cluster and the SageMaker HyperPod cluster on it (or an existing HyperPod cluster to use)."""

    kubernetes_version: str = Field(
        DEFAULT_KUBERNETES_VERSION,
        description="Kubernetes version of the EKS cluster: one SageMaker HyperPod documents for EKS that is still in "
        f"EKS standard support ({', '.join(HYPERPOD_EKS_KUBERNETES_VERSIONS)}; ends of standard support: "
        + ", ".join(f"{v} {end}" for v, end in HYPERPOD_EKS_KUBERNETES_VERSIONS.items())
        + "). Refused from that date on (a new cluster on it would be billed extended support); `mtrl config show` and "
        "synth warn, naming the date, within the 60 days before it.",
    )
    eks_support_type: Literal["STANDARD", "EXTENDED"] = Field(
        "STANDARD",
        description="The EKS cluster's UpgradePolicy.SupportType: what happens when kubernetes_version leaves EKS "
        "standard support. STANDARD: EKS upgrades the control plane to the next minor version itself on that date "
        "(no extended-support charge; upgrade kubernetes_version and deploy before then). EXTENDED: the cluster "
        "stays on its version for up to 12 more months, billed extended support (6x the control-plane price). "
        "CloudFormation's own default is EXTENDED.",
    )
    eks_control_plane_logs: list[EksLogType] = Field(
        default_factory=lambda: list(EKS_LOG_TYPES),
        description="EKS control-plane log types sent to CloudWatch Logs (all five by default: about USD 1.25 a "
        "month for an idle cluster at an assumed 0.5 GB each, USD 0.50 per GB; docs/operations.md, 'Costs'). Fewer "
        "types cost less and lose that audit trail (cdk-nag AwsSolutions-EKS2 is then acknowledged with this "
        "setting as the reason); [] sends none.",
    )
    eks_endpoint_access: Literal["private", "public_and_private", "public"] = Field(
        "private",
        description="EKS API endpoint access of a cluster this deployment creates. 'private' (default): no public "
        "endpoint; every client mtrl deploys reaches the private one from inside the VPC (HyperPod nodes, the Nova "
        "Forge runner, and the deploy-time Helm installer and the pipeline's backend function, which run in the "
        "private subnets). mtrl's CLI makes no Kubernetes calls, so operators need no public endpoint; for kubectl "
        "from outside the VPC set 'public_and_private' with eks_public_access_cidrs (your operators' egress ranges). "
        "'public' turns the private endpoint off (nodes then reach the public one through the NAT gateway). Access "
        "always needs an access entry (IAM); there is no anonymous access. Ignored with existing_eks_cluster_name.",
    )
    eks_public_access_cidrs: list[str] = Field(
        default_factory=list,
        max_length=40,
        description="IPv4 CIDR blocks that may reach the public EKS endpoint (EKS allows up to 40): required with "
        "eks_endpoint_access 'public_and_private' or 'public', refused with 'private' (the default, where it is "
        "empty). 0.0.0.0/0 opens the public endpoint to every address (synth warns); 'public' takes nothing "
        "narrower, since EKS restricts the public endpoint only while the private one is on.",
    )
    eks_admin_role_arns: list[str] = Field(
        default_factory=list,
        description="IAM roles (operators) given cluster-admin through EKS access entries. kubectl reaches the "
        "private-only endpoint (the default) from inside the VPC only; from outside it, also set eks_endpoint_access "
        "'public_and_private' with eks_public_access_cidrs.",
    )
    eks_viewer_role_arns: list[str] = Field(
        default_factory=list,
        description="IAM roles given read-only cluster access through EKS access entries.",
    )
    hyperpod_instance_groups: list[InstanceGroupSettings] = Field(
        default_factory=_default_instance_groups,  # type: ignore[arg-type]
        description="HyperPod instance groups (JSON list of objects with keys name, instance_type, run_count, "
        "idle_count, threads_per_core, ebs_volume_size_gb, deep_health_checks, training_plan_arn, "
        "availability_zone_id, purpose, labels, taints). Exactly one has purpose 'training'.",
    )
    hyperpod_restricted_instance_group: RestrictedInstanceGroupSettings | None = Field(
        None,
        description="Optional restricted instance group for Amazon Nova Forge (JSON object: the instance-group keys "
        "plus fsx_lustre_size_gib, fsx_lustre_throughput_per_tib). Without it (the default) the deployment builds "
        "nothing of the hyperpod backend (no runner or RFT role, runner image or task, environment packages) and "
        "refuses hyperpod runs.",
    )
    hyperpod_availability_zone_names: dict[str, str] = Field(
        default_factory=dict,
        description='AZ ID → AZ name in this account (e.g. {"use1-az6": "us-east-1d"}, from `aws ec2 '
        "describe-availability-zones`); needed for every availability_zone_id an instance group uses.",
    )
    hyperpod_node_access_entry: bool = Field(
        False,
        description="Also declare the node execution role's HYPERPOD_LINUX EKS access entry in the stack. Off by "
        "default: HyperPod's CreateCluster creates the access entries of its roles itself (ClusterMetadata."
        "EksRoleAccessEntries), and a pre-created entry for the same principal can make that call fail.",
    )
    hyperpod_helm_chart_revision: str = Field(
        HELM_CHART_COMMIT,
        pattern=_COMMIT,
        description="Full 40-character commit of aws/sagemaker-hyperpod-cli whose helm_chart/HyperPodHelmChart is "
        f"installed (default: release tag {HELM_CHART_TAG}). Use a commit on the default branch or a release tag, "
        "never a branch name or a pull-request ref.",
    )
    hyperpod_helm_chart_sha256: str = Field(
        HELM_CHART_SHA256,
        pattern=_SHA256,
        description="SHA-256 over the files of that commit's helm_chart/HyperPodHelmChart (mtrl.kube.charts."
        "tree_sha256: each file's path and SHA-256); the installer refuses a chart whose files differ. Set it "
        "with hyperpod_helm_chart_revision (the default is the default revision's).",
    )
    hyperpod_helm_extra_components: list[ExtraHelmComponent] = Field(
        default_factory=list,
        description="Optional components of the HyperPod dependencies chart to install besides the required "
        "health-monitoring-agent, NVIDIA and EFA device plugins and training operator.",
    )
    hyperpod_deploy_interrupts_runs: list[str] = Field(
        default_factory=list,
        description="Run ids a cluster-stack deploy may interrupt. A deploy that changes the cluster refuses to "
        "proceed while a run holds the cluster (a slot in the run table), because updating the HyperPod cluster "
        "resets every group to its idle count; name the holding runs here (`-c`) to deploy anyway.",
    )
    existing_hyperpod_cluster_name: str | None = Field(
        None,
        pattern=_CLUSTER_NAME,
        description="Use this existing HyperPod cluster instead of creating EKS and HyperPod (needs "
        "existing_eks_cluster_name).",
    )
    existing_eks_cluster_name: str | None = Field(
        None, pattern=_EKS_CLUSTER_NAME, description="The EKS cluster that orchestrates existing_hyperpod_cluster_name."
    )

    @field_validator("eks_admin_role_arns", "eks_viewer_role_arns")
    @classmethod
    def _cluster_role_arns_shape(cls, value: list[str]) -> list[str]:
        bad = [arn for arn in value if not _ROLE_ARN.match(arn)]
        if bad:
            raise ValueError(f"not IAM role ARNs: {bad}")
        if len(set(value)) != len(value):
            raise ValueError("contains duplicates")
        return value

    @field_validator("eks_public_access_cidrs")
    @classmethod
    def _public_access_cidrs_shape(cls, value: list[str]) -> list[str]:
        bad = []
        for cidr in value:
            try:
                network = ipaddress.IPv4Network(cidr, strict=True)
            except ValueError:
                bad.append(cidr)
                continue
            if any(network.subnet_of(block) for block in _NEVER_PUBLIC_SOURCES):
                bad.append(cidr)  # the public endpoint never sees such a source address
        if bad:
            raise ValueError(f"not public IPv4 CIDR blocks with their host bits zero (e.g. 203.0.113.0/24): {bad}")
        if len(set(value)) != len(value):
            raise ValueError("contains duplicates")
        return value

    @model_validator(mode="after")
    def _public_access_cidrs_match_the_endpoint(self) -> Self:
        if self.eks_endpoint_access == "private":
            if self.eks_public_access_cidrs:
                raise ValueError(
                    f"eks_public_access_cidrs: {self.eks_public_access_cidrs} is for a public EKS endpoint, but "
                    "eks_endpoint_access is 'private' (the default: no public endpoint); for kubectl from those "
                    "ranges set eks_endpoint_access to 'public_and_private' too, or drop eks_public_access_cidrs"
                )
            return self
        if not self.eks_public_access_cidrs:
            raise ValueError(
                f"eks_public_access_cidrs is empty, but eks_endpoint_access '{self.eks_endpoint_access}' turns the "
                "public endpoint on: list the public IPv4 ranges that may reach it (e.g. your operators' egress "
                "ranges: -c eks_public_access_cidrs='[\"203.0.113.0/24\"]'), or keep eks_endpoint_access 'private'"
            )
        # EKS refuses to restrict the public endpoint while private access is off: the nodes would be cut off.
        if self.eks_endpoint_access == "public" and ANYWHERE not in self.eks_public_access_cidrs:
            raise ValueError(
                f"eks_public_access_cidrs: {self.eks_public_access_cidrs} restricts the public endpoint, which EKS "
                "allows only with private access on (the nodes reach it privately): set eks_endpoint_access to "
                "'public_and_private'"
            )
        return self

    @property
    def public_endpoint_open_to_all(self) -> bool:
        """The created cluster's public EKS endpoint is on and serves every address (0.0.0.0/0)."""
        return (
            self.existing_eks_cluster_name is None
            and self.eks_endpoint_access != "private"
            and ANYWHERE in self.eks_public_access_cidrs
        )

    def public_endpoint_warning(self) -> str | None:
        """What synth and `mtrl config show` warn when the public endpoint serves every address."""
        if not self.public_endpoint_open_to_all:
            return None
        return (
            f"eks_endpoint_access '{self.eks_endpoint_access}' with eks_public_access_cidrs {ANYWHERE}: the EKS API "
            "endpoint answers every address on the internet (calls still need an access entry). mtrl needs no public "
            "endpoint; list only your operators' egress ranges, or keep the default 'private' (docs/operations.md, "
            "EKS API endpoint)"
        )

    @field_validator("hyperpod_availability_zone_names")
    @classmethod
    def _zone_names_shape(cls, value: dict[str, str]) -> dict[str, str]:
        for zone_id, name in value.items():
            if not re.match(_AZ_ID, zone_id):
                raise ValueError(f"'{zone_id}' is not an AZ ID such as 'use1-az6'")
            if not re.match(r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$", name):
                raise ValueError(f"'{name}' is not an AZ name such as 'us-east-1d'")
        return value

    @field_validator("hyperpod_helm_extra_components", "eks_control_plane_logs")
    @classmethod
    def _extras_unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("contains duplicates")
        return value

    @field_validator("kubernetes_version")
    @classmethod
    def _kubernetes_version_supported(cls, value: str) -> str:
        if value not in HYPERPOD_EKS_KUBERNETES_VERSIONS:
            raise ValueError(
                f"'{value}' is not a version SageMaker HyperPod documents for EKS that is in EKS standard support "
                f"(supported: {', '.join(HYPERPOD_EKS_KUBERNETES_VERSIONS)})"
            )
        return value

    @field_validator("hyperpod_deploy_interrupts_runs")
    @classmethod
    def _interrupted_runs_are_run_ids(cls, value: list[str]) -> list[str]:
        bad = [run_id for run_id in value if not re.match(_RUN_ID, run_id)]
        if bad:
            raise ValueError(f"not run ids (as `mtrl runs` shows them): {bad}")
        return value

    @model_validator(mode="after")
    def _chart_digest_follows_the_revision(self) -> Self:
        if self.hyperpod_helm_chart_revision != HELM_CHART_COMMIT and self.hyperpod_helm_chart_sha256 == (
            HELM_CHART_SHA256
        ):
            raise ValueError(
                "hyperpod_helm_chart_sha256: another hyperpod_helm_chart_revision needs the digest of its chart's "
                "files too (python -c 'from mtrl.kube.charts import tree_sha256' over its helm_chart/"
                "HyperPodHelmChart); the default digest is the default revision's"
            )
        return self

    @model_validator(mode="after")
    def _cluster_groups_consistent(self) -> Self:
        if (self.existing_hyperpod_cluster_name is None) != (self.existing_eks_cluster_name is None):
            raise ValueError(
                "existing_eks_cluster_name: set both existing_hyperpod_cluster_name and existing_eks_cluster_name, "
                "or neither"
            )
        groups: list[_GroupBase] = list(self.hyperpod_instance_groups)
        if self.hyperpod_restricted_instance_group is not None:
            groups.append(self.hyperpod_restricted_instance_group)
        names = [group.name for group in groups]
        if len(set(names)) != len(names):
            raise ValueError(f"hyperpod_instance_groups: instance group names must be unique (got {names})")
        if not self.hyperpod_instance_groups:
            raise ValueError("hyperpod_instance_groups: at least one instance group is required")
        training = [g.name for g in self.hyperpod_instance_groups if g.purpose == "training"]
        if len(training) != 1:
            raise ValueError(f"hyperpod_instance_groups: exactly one group needs purpose 'training' (got {training})")
        missing = sorted(
            {g.availability_zone_id for g in groups if g.availability_zone_id}
            - set(self.hyperpod_availability_zone_names)
        )
        if missing:
            raise ValueError(f"hyperpod_availability_zone_names: no AZ name given for AZ IDs {missing}")
        if any(g.deep_health_checks for g in groups) and "deep-health-check" not in self.hyperpod_helm_extra_components:
            raise ValueError(
                "hyperpod_helm_extra_components: instance groups request deep health checks, so add "
                "'deep-health-check' (its RBAC comes from the chart)"
            )
        return self

    @property
    def uses_existing_cluster(self) -> bool:
        return self.existing_hyperpod_cluster_name is not None

    @property
    def nova_forge_configured(self) -> bool:
        """Nova Forge (the hyperpod backend) trains only on a restricted instance group: without one the deployment
        builds none of its parts that need subscriber-only files (the runner image)."""
        return self.hyperpod_restricted_instance_group is not None

    @property
    def training_instance_group(self) -> InstanceGroupSettings:
        return next(g for g in self.hyperpod_instance_groups if g.purpose == "training")

    @property
    def run_instance_group(self) -> InstanceGroupSettings | RestrictedInstanceGroupSettings:
        """The group the hyperpod backend scales per run (Nova Forge trains on the restricted group if there is one)."""
        return self.hyperpod_restricted_instance_group or self.training_instance_group

    @property
    def helm_components(self) -> dict[str, bool]:
        """Every switchable chart component with whether it is installed (unlisted ones stay off)."""
        wanted = set(REQUIRED_HELM_COMPONENTS) | set(self.hyperpod_helm_extra_components)
        return {name: name in wanted for name in HELM_COMPONENT_VALUE_KEYS}
